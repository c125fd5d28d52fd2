"""Compare two `diffvoice eval-model --out` reports figure by figure (timings left out).

    python docs/agent/compare_eval.py BEFORE.json AFTER.json [--sets NAME ...]

Prints how many non-timing figures are equal and each one that differs (set, figure, before,
after); with --sets, only those sets (and "all" totals are skipped unless named). Exit 0."""

import argparse
import json
import math

TIMING = ("latency", "_s", "wall")


def figures(report: dict, sets: list[str]) -> dict[tuple, float]:
    out = {}
    for spec, res in report["settings"].items():
        for name, block in res.items():
            if sets and name.split("+")[0] not in sets:
                continue
            for key, value in block["summary"].items():
                if isinstance(value, (int, float)) and not any(t in key for t in TIMING):
                    out[(spec, name, key)] = value
    for spec, paths in report.get("episodes", {}).items():
        for path, ep in paths.items():
            for key in ("n", "success_rate", "confirmed_rate", "mean_model_turns"):
                out[(spec, f"closed-loop+{path}", key)] = ep[key]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--sets", nargs="*", default=[])
    args = ap.parse_args()
    a = figures(json.load(open(args.before)), args.sets)
    b = figures(json.load(open(args.after)), args.sets)
    common = sorted(set(a) & set(b))
    same = [k for k in common if a[k] == b[k] or (
        isinstance(a[k], float) and isinstance(b[k], float) and math.isnan(a[k])
        and math.isnan(b[k]))]
    print(f"{len(same)} of {len(common)} non-timing figures equal "
          f"({len(set(a) - set(b))} only before, {len(set(b) - set(a))} only after)")
    for k in common:
        if k not in same:
            print(f"  {k[1]:45s} {k[2]:24s} {a[k]!s:>22} -> {b[k]!s}")


if __name__ == "__main__":
    main()
