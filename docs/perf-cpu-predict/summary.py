"""The table of docs/perf.md's "Prediction over the committable slots" from this folder's JSON:
`python docs/perf-cpu-predict/summary.py` (after run.sh)."""

import json
from pathlib import Path

HERE = Path(__file__).parent


def row(path: Path) -> str:
    d = json.loads(path.read_text())
    b1, b16 = d["batch1"], d["batch16"]
    cells = [f"{b1['aggregate_tok_per_s']:,.0f}", f"{b1['ttft_ms']['p50']:.1f}",
             f"{b16['aggregate_tok_per_s']:,.0f}"]
    host = d.get("host_profile")
    if host:
        for key in ("forward_us_per_pass", "host_us_per_pass"):
            cells.append(f"{host['1'][key]:,.0f} / {host['16'][key]:,.0f}")
    else:
        cells += ["-", "-"]
    return f"| {path.stem} | " + " | ".join(cells) + " |"


print("| run | tok/s b1 | first block p50 ms | tok/s b16 | forward µs/pass b1 / b16 "
      "| other µs/pass b1 / b16 |")
print("|---|---|---|---|---|---|")
for path in sorted(HERE.glob("*.json")):
    print(row(path))
