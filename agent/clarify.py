"""Ask instead of blending: replace an unsure reply by a short clarifying question.

A diffusion decoder fills several slots per pass as if they were independent; when two answers
are about equally likely, the reply mixes them ("We take walk, fillings we can, ..."). The engine
reports, per request, the lowest softmax probability of any token it committed in the first block
(`Delta.first_block_confidence`). `guard(text, first_block_confidence, is_well_formed)` returns
(reply, clarified):
  - a well-formed reply whose first block was committed with confidence >= `threshold` is kept;
  - otherwise the caller hears CLARIFY ("Sorry, was that about our hours, our prices, or an
    appointment?"), never a blend and never the generic out-of-scope fallback.
The first-block test can run before anything is spoken (streaming); the well-formed test needs the
whole reply, so a streaming caller that already spoke the first block applies only the first.
Careful retry: before a reply that is not well-formed is replaced, the same request is decoded
once more one token per pass (engine.decoding.careful, about twice the passes); its reply is kept
when it is well-formed, passes the first-block test and `agrees` with the blend (difflib's ratio
over the words of the two >= RETRY_AGREEMENT): a blend whose words are mostly one answer becomes
that answer, a blend that mixed two different answers ("We're across the in we the public
library" for a garbled question, retried as the booking answer) is still asked about.
RETRY_AGREEMENT = 0.5 was chosen reading the 55 blends of one run over the template, dialogue,
independent and spoken (Whisper tiny.en) sets with their retries: not a held-out choice.
DEFAULT_THRESHOLD = 0.5 was chosen on the template and dialogue held-out sets of an intermediate
checkpoint (step ~1200 of the v2 run), never on the independent set: raising it from 0 to 0.5
turned 2.5% of all replies from wrong answers into clarifying questions at a cost of 1.2% right
answers; each further 0.1 costs about as many right answers as it saves wrong ones.
Knows nothing about models or tokenizers.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import NamedTuple

CLARIFY = "Sorry, was that about our hours, our prices, or an appointment?"
DEFAULT_THRESHOLD = 0.5
RETRY_AGREEMENT = 0.5
_WORD = re.compile(r"[a-z0-9]+")


def agrees(first: str, second: str, min_ratio: float = RETRY_AGREEMENT) -> bool:
    """Whether a careful retry `second` says what the blended reply `first` was mostly saying:
    difflib's ratio over their lower-cased words (2 * matches / total words) >= `min_ratio`."""
    a, b = _WORD.findall(first.lower()), _WORD.findall(second.lower())
    return bool(a and b) and difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() \
        >= min_ratio


def guard(text: str, first_block_confidence: float | None,
          is_well_formed: Callable[[str], bool], threshold: float = DEFAULT_THRESHOLD
          ) -> tuple[str, bool]:
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    unsure = first_block_confidence is not None and first_block_confidence < threshold
    if unsure or not is_well_formed(text):
        return CLARIFY, True
    return text, False


class Served(NamedTuple):
    final: str                 # what the caller hears
    clarified: bool            # the guard replaced the reply
    how: str | None            # agent.grounding's `how`
    retried: bool = False      # the careful retry's reply is what the caller hears


def served(text: str, first_block_confidence: float | None, messages: list[dict],
           is_well_formed: Callable[[str], bool], is_flow_reply: Callable[[str], bool] | None,
           result_reply: Callable[[str, dict, dict], str | None] | None,
           threshold: float = DEFAULT_THRESHOLD, grounding: bool = True,
           slot_question: Callable[[list[dict]], str | None] | None = None,
           next_question: Callable[[list[dict]], str | None] | None = None,
           retry: tuple[str, float | None] | None = None
           ) -> Served:
    """Served(what the caller hears, clarified, grounding's `how`, whether the careful retry
    was used) for a whole text reply, as the
    server's guard (agent/guard.py, whole-reply mode) decides it: grounding
    (agent.grounding), then `guard`; a clarified reply after a tool result becomes the
    trained result reply when there is one; mid-booking, `slot_question(messages)` (the next
    slot-filling question, agent.dialogues.Dialogues.slot_question) when it gives one;
    else CLARIFY. `next_question` is grounding's (agent.grounding.ground). `retry`: the
    careful retry's (text, first-block confidence), used in place of a reply that is not
    well-formed after grounding when it `agrees` with it (see the module docstring); the
    caller decodes it only for a reply that is not well-formed."""
    from diffvoice.agent.grounding import ground

    def grounded(reply: str) -> tuple[str, str | None]:
        if grounding and is_flow_reply is not None:
            return ground(reply, messages, is_flow_reply, result_reply, next_question)
        return reply, None

    raw, retried = text, False
    text, how = grounded(text)
    if retry is not None and not is_well_formed(text) and agrees(raw, retry[0]):
        second, second_how = grounded(retry[0])
        if is_well_formed(second):
            text, how, first_block_confidence = second, second_how, retry[1]
            retried = True
    final, clarified = guard(text, first_block_confidence, is_well_formed, threshold)
    if clarified:
        final = replacement(messages, result_reply, slot_question)
    return Served(final, clarified, how, retried and not clarified)


def replacement(messages: list[dict] | None,
                result_reply: Callable[[str, dict, dict], str | None] | None,
                slot_question: Callable[[list[dict]], str | None] | None,
                question: str = CLARIFY) -> str:
    """What replaces an unsure reply to `messages`: after a tool result, the trained result
    reply; mid-booking, the next slot question; else `question`."""
    from diffvoice.agent.grounding import last_call

    if not messages:
        return question
    last = last_call(messages)
    if last is not None:
        reply = result_reply(*last) if result_reply is not None else None
    else:
        reply = slot_question(messages) if slot_question is not None else None
    return reply or question
