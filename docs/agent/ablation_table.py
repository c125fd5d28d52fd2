"""The ablation table from docs/agent/ablation.sh's reports: each set's accuracy as served with
every rule, and the change without each rule (points); and, on the sets where a clarifying
question never counts as right (template, independent, spoken), the wrong answers said (1 -
accuracy - clarify rate) and their change. A rule earns its place when it adds at least one
point of accuracy on a set or takes at least one point of wrong answers away on one.
Writes DIR/ablation.json; prints Markdown.

    python docs/agent/ablation_table.py docs/agent"""

import json
import sys
from pathlib import Path

SETS = ("template+tools", "dialogue+tools", "independent+tools",
        "spoken:whisper-tiny.en+tools", "spoken-kokoro:whisper-tiny.en+tools")
RULES = ("slot_answer", "follow_up", "later_turn_kept", "first_turn_snap", "first_block",
         "grounding", "well_formed", "careful_retry", "replacement")


WRONG_SETS = tuple(s for s in SETS if not s.startswith("dialogue"))  # (a dialogue reply's
# replacement after a tool result is the trained result reply, which can be right)


def scores(path: Path) -> dict[str, float]:
    report = json.loads(path.read_text())
    (spec, res), = report["settings"].items()
    out = {name: res[name]["summary"]["accuracy"] for name in SETS}
    out["closed-loop+tools"] = report["episodes"][spec]["tools"]["success_rate"]
    for name in WRONG_SETS:
        s = res[name]["summary"]
        out[f"wrong:{name}"] = 1 - s["accuracy"] - s["clarify_rate"]
    return out


def main(folder: str) -> None:
    base = Path(folder)
    every = scores(base / "ablation-all.json")
    table = {"every rule": every}
    for rule in RULES:
        table[f"without {rule}"] = scores(base / f"ablation-without-{rule}.json")
    (base / "ablation.json").write_text(json.dumps(table, indent=1) + "\n")
    acc = [c for c in every if not c.startswith("wrong:")]
    wrong = [c for c in every if c.startswith("wrong:")]
    for title, cols in (("accuracy", acc), ("wrong answers said", wrong)):
        head = " | ".join(c.removeprefix("wrong:").replace("+tools", "") for c in cols)
        print(f"\n| {title} | {head} |")
        print("|---" * (len(cols) + 1) + "|")
        print("| every rule | " + " | ".join(f"{100 * every[c]:.1f}%" for c in cols) + " |")
        for rule in RULES:
            row = table[f"without {rule}"]
            print(f"| without {rule} | "
                  + " | ".join(f"{100 * (row[c] - every[c]):+.1f}" for c in cols) + " |")
    print("\n| rule | adds >= 1 point of accuracy, or takes >= 1 point of wrong answers away, "
          "on a set |\n|---|---|")
    for rule in RULES:
        row = table[f"without {rule}"]
        gain = max([100 * (every[c] - row[c]) for c in acc]
                   + [100 * (row[c] - every[c]) for c in wrong])
        print(f"| {rule} | {'yes' if gain >= 1.0 else 'no'} ({gain:.1f}) |")


if __name__ == "__main__":
    main(sys.argv[1])
