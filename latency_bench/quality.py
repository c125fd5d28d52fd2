"""Answer quality beside latency: ASR word error rate and task success, per concurrency level.

Contract (pure functions of a voice report's per-turn records, `report["turns"]`):
- WER is latency_bench.wer's `word_edits(reference, hypothesis) -> (errors, reference_words)`
  (word-level Levenshtein distance after normalising both); corpus WER is
  sum(errors) / sum(reference_words), so long prompts weigh by their length.
- `expected_facts(turn) -> tuple[str, ...]`: what a correct answer must contain: the turn's own
  `expected` list when the corpus gave one, else the built-in table for the receptionist
  prompts (the embedded model's fact sheet, agent/default_facts.yaml), else ().
- `task_success(turn)`: whether the bot's answer contains any expected fact (normalised).
- `sweep_quality(report) -> {concurrency: {"wer", "wer_turns", "task_success",
  "task_turns"}}`: over the measured ("ok") turns that have a prompt text and a transcript
  (WER) or an expected fact (task success); None with 0 turns. A timed-out or failed turn has
  no answer to judge and is counted in the latency table's errors/timeouts instead.
Knows nothing about sockets, audio or rendering.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from diffvoice.latency_bench.wer import word_edits

# Prompt text (latency_bench.corpus.RECEPTIONIST_PROMPTS) -> facts a correct answer states, as
# the embedded model says them (default_facts.yaml's spoken values; a test checks they are
# still in that file). Prompts without one checkable fact are left out.
RECEPTIONIST_FACTS: dict[str, tuple[str, ...]] = {
    "When are you open on Saturday?": ("9 am to 1 pm",),
    "What are your opening hours for Thursday?": ("10 am to 7 pm",),
    "Where exactly is the office located?": ("214 harbor street",),
    "How much does a cleaning cost?": ("95 dollars",),
    "What is your phone number?": ("555 0142",),
    "Are you open on Sunday?": ("closed",),
}

_WORD = re.compile(r"[a-z0-9']+")


def words(text: str | None) -> list[str]:
    return _WORD.findall((text or "").lower())



def expected_facts(turn: Mapping[str, Any]) -> tuple[str, ...]:
    own = turn.get("expected")
    if isinstance(own, str):
        return (own,)
    if isinstance(own, list | tuple):
        return tuple(str(x) for x in own if str(x).strip())
    return RECEPTIONIST_FACTS.get(str(turn.get("prompt") or ""), ())


def task_success(turn: Mapping[str, Any]) -> bool | None:
    """True/False when the turn has an expected fact, else None."""
    facts = expected_facts(turn)
    if not facts:
        return None
    answer = " ".join(words(turn.get("bot_text")))
    return any(" ".join(words(fact)) in answer for fact in facts)


def sweep_quality(report: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    turns = report.get("turns") or []
    out: dict[int, dict[str, Any]] = {}
    for point in report["sweep"]:
        level = point["concurrency"]
        ok = [t for t in turns if t.get("concurrency") == level and t.get("status") == "ok"]
        errors = ref_words = wer_turns = 0
        successes = task_turns = 0
        for turn in ok:
            if turn.get("prompt") and turn.get("transcript") is not None:
                e, n = word_edits(turn["prompt"], turn["transcript"])
                errors, ref_words, wer_turns = errors + e, ref_words + n, wer_turns + 1
            success = task_success(turn)
            if success is not None:
                successes, task_turns = successes + int(success), task_turns + 1
        out[level] = {"wer": errors / ref_words if ref_words else None, "wer_turns": wer_turns,
                      "task_success": successes / task_turns if task_turns else None,
                      "task_turns": task_turns}
    return out


def has_turns(report: Mapping[str, Any]) -> bool:
    return bool(report.get("turns"))
