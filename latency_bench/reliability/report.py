"""Render the merged reliability results (run.write's JSON) as docs/reliability.md.

Contract: `render(merged) -> str`. One section per part that has run: the command and server
flags it ran with, its headline figures, and every check with a pass/fail mark; a part whose
check failed says FAILED in its heading, so a missed goal is never buried. Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

TITLES = {
    "fuzz": "Fuzz: malformed input on every surface while real calls stream",
    "isolation": "Isolation: one abusive client, other callers unaffected",
    "attacks": "Attacks: issue 39's ten findings re-run while two callers speak",
    "siege": "Siege: issue 54's findings and an API flood while two callers speak",
    "soak": "Soak: simulated callers for minutes",
    "storm": "Barge-in storm",
    "admission": "Admission: capacity, per-IP cap, idle reaping",
    "memory": "Memory per session",
    "realtime": "Realtime: malformed /v1/realtime events while two Realtime callers talk, "
                "socket limits, memory per session",
}
ORDER = ("fuzz", "isolation", "attacks", "siege", "soak", "storm", "admission", "memory",
         "realtime")
_HIDE = {"checks", "phases",
         "samples", "families", "curve", "cancel_passes", "barge_delays_s", "idle",
         "media_calls", "mismatch_examples", "error_examples", "failed_turns"}


def _figures(result: dict[str, Any]) -> list[str]:
    lines = []
    for key, value in result.items():
        if key in _HIDE:
            continue
        shown = json.dumps(value, default=str) if isinstance(value, (dict, list)) else value
        lines.append(f"- `{key}`: {shown}")
    return lines


def render(merged: dict[str, Any]) -> str:
    parts, runs = merged.get("parts", {}), merged.get("runs", {})
    out = ["# Reliability", "",
           "What happens when callers misbehave, crowd in, interrupt, or stay for a long time. "
           "Every figure below was measured by `diffvoice bench reliability` "
           "(latency_bench/reliability/) against a real `diffvoice serve` process on loopback "
           "(127.0.0.0/8; each simulated caller connects from its own loopback address so the "
           "per-IP cap applies as it would to real clients). Every loop in the harness is "
           "bounded in count and time. `make test` runs the same parts at a tiny scale "
           "(tests/latency_bench/test_reliability_short.py).", ""]
    failed = [name for name in ORDER if name in parts
              and not all(c["ok"] for c in parts[name].get("checks", []))]
    passed = [name for name in ORDER if name in parts and name not in failed]
    out += [f"**Summary:** passed: {', '.join(passed) or 'none'}; "
            f"failed: {', '.join(failed) or 'none'}.", ""]
    if merged.get("notes"):
        out += ["## What the figures say", "", merged["notes"].strip(), ""]
    for name in ORDER:
        if name not in parts:
            continue
        result, run = parts[name], runs.get(name, {})
        ok = name not in failed
        out += [f"## {TITLES[name]}{'' if ok else ' — FAILED'}", ""]
        if run:
            out += [f"Command: `{run.get('command')}`  ", f"Finished: {run.get('finished')}  ",
                    f"Server: `{run.get('server_args')}` — {json.dumps(run.get('server'))}  ",
                    f"Server log: {json.dumps(run.get('server_log'))}  ",
                    f"Machine: {json.dumps(run.get('machine'))}  ",
                    f"Load average (1/5/15 min) during the run: "
                    f"{json.dumps(run.get('load_average'))}", ""]
        out += ["| check | result | detail |", "|---|---|---|"]
        for c in result.get("checks", []):
            detail = str(c.get("detail", "")).replace("|", "\\|")[:400]
            out.append(f"| {c['name']} | {'pass' if c['ok'] else '**FAIL**'} | {detail} |")
        out += ["", *_figures(result), ""]
        if name == "siege" and result.get("phases"):
            out += ["Per phase:", "", *(f"- `{k}`: {json.dumps(v, default=str)}"
                                        for k, v in result["phases"].items()), ""]
        if name in ("memory", "realtime") and result.get("curve"):
            out += ["RSS (MB) after N sessions: " + ", ".join(f"{n}: {mb}" for n, mb in
                                                             result["curve"]), ""]
        if name == "fuzz" and result.get("families"):
            out += ["Inputs per surface/family (documented outcome / not):", "",
                    ", ".join(f"`{k}` {v['ok']}/{v['bad']}" for k, v in
                              sorted(result["families"].items())), ""]
        if name == "realtime" and result.get("families"):
            out += ["Malformed events per family (answered as documented / sent):", "",
                    ", ".join(f"`{k}` {v['answered']}/{v['sent']}" for k, v in
                              sorted(result["families"].items())), ""]
        if name in ("fuzz", "realtime") and result.get("families"):
            if result.get("mismatch_examples"):
                out += ["Mismatches: " + "; ".join(result["mismatch_examples"]), ""]
        if name == "soak" and result.get("samples"):
            s = result["samples"]
            out += ["/metrics samples (t s: RSS MB, fds, loop tasks, sessions, engine running):",
                    "", ", ".join(
                        f"{x['t']:.0f}: {(x.get('process_resident_memory_bytes') or 0) / 2**20:.0f}"
                        f"/{x.get('process_open_fds'):.0f}/{x.get('diffvoice_event_loop_tasks')}"
                        f"/{x.get('diffvoice_active_sessions')}"
                        f"/{x.get('diffvoice_engine_running_requests')}"
                        for x in s[:: max(1, len(s) // 30)]), ""]
    return "\n".join(out) + "\n"
