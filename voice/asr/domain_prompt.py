"""Whisper's domain prompt for a receptionist: the words its callers use, from the fact sheet.

Whisper conditions on "previous text" (`<|startofprev|>` tokens before the transcript, what
faster-whisper calls `initial_prompt`); a prompt holding the business's own words makes the
decoder prefer them when the audio is unclear ("filling", not "feeling"; "whitening", "walk
ins"). The prompt is built from the fact sheet alone, never from evaluation data:

    Bluebird Dental, dental clinic: cleanings, fillings, teeth whitening, ... Do you take
    insurance? What forms of payment do you take? ...

the business name and kind, every service's name, and the first example question of every FAQ
entry. Chosen on the training questions spoken by the training voices (agent/train/asr_train
.jsonl's sentences and voices, 120 of them, Whisper tiny.en, the served pass): WER 36.3% without
a prompt, 33.5% with names and services, 32.7% with the FAQ questions too; on the independent
set 35.0% -> 31.1% (python -m diffvoice.latency_bench.whisper_prompt, docs/voice.md "Domain
prompt"). Knows nothing about audio or pipecat.
"""

from __future__ import annotations

import re
from pathlib import Path

_PRONOUN_I = re.compile(r"\bi\b(?=$|[\s'])")


def _facts(facts_path: str | Path | None):
    from diffvoice.agent.facts import load_facts

    return load_facts(facts_path) if facts_path else load_facts()


def names_prompt(facts_path: str | Path | None = None) -> str:
    """The domain prompt's first sentence: business name, kind and every service's name."""
    return _names(_facts(facts_path))


def _names(facts) -> str:
    services = ", ".join(s.name for s in facts.services)
    return f"{facts.name}, {facts.kind}: {services}." if services else f"{facts.name}."


def domain_prompt(facts_path: str | Path | None = None) -> str:
    """The prompt for the receptionist of `facts_path` (None: the default fact sheet)."""
    facts = _facts(facts_path)
    head = _names(facts)
    questions = [item.questions[0] for item in facts.faq if item.questions]
    # as a transcript writes them (Whisper copies the prompt's style: "what do i do" in the
    # prompt gave transcripts "Can i just show up ...")
    sentences = [_PRONOUN_I.sub("I", q[:1].upper() + q[1:].rstrip("?. ") + "?") for q in questions]
    return " ".join([head, *sentences])
