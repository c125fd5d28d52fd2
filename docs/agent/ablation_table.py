"""The ablation table from docs/agent/ablation.sh's reports: each set's accuracy as served with
every rule, and the change without each rule (points). Writes DIR/ablation.json; prints Markdown.

    python docs/agent/ablation_table.py docs/agent"""

import json
import sys
from pathlib import Path

SETS = ("template+tools", "dialogue+tools", "independent+tools",
        "spoken:whisper-tiny.en+tools", "spoken-kokoro:whisper-tiny.en+tools")
RULES = ("slot_answer", "follow_up", "later_turn_kept", "first_turn_snap", "first_block",
         "grounding", "well_formed", "careful_retry", "replacement")


def scores(path: Path) -> dict[str, float]:
    report = json.loads(path.read_text())
    (spec, res), = report["settings"].items()
    out = {name: res[name]["summary"]["accuracy"] for name in SETS}
    out["closed-loop+tools"] = report["episodes"][spec]["tools"]["success_rate"]
    return out


def main(folder: str) -> None:
    base = Path(folder)
    every = scores(base / "ablation-all.json")
    table = {"every rule": every}
    for rule in RULES:
        table[f"without {rule}"] = scores(base / f"ablation-without-{rule}.json")
    (base / "ablation.json").write_text(json.dumps(table, indent=1) + "\n")
    cols = list(every)
    head = " | ".join(c.replace("+tools", "") for c in cols)
    print(f"| | {head} | adds >= 1 point on a set |")
    print("|---" * (len(cols) + 2) + "|")
    print("| every rule (accuracy) | " + " | ".join(f"{100 * every[c]:.1f}%" for c in cols)
          + " | |")
    for rule in RULES:
        row = table[f"without {rule}"]
        delta = [100 * (every[c] - row[c]) for c in cols]
        print(f"| without {rule} | " + " | ".join(f"{-d:+.1f}" for d in delta)
              + f" | {'yes' if max(delta) >= 1.0 else 'no'} |")


if __name__ == "__main__":
    main(sys.argv[1])
