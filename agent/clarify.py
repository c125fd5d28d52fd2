"""Ask instead of blending: replace an unsure reply by a short clarifying question.

A diffusion decoder fills several slots per pass as if they were independent; when two answers
are about equally likely, the reply mixes them ("We take walk, fillings we can, ..."). The engine
reports, per request, the lowest softmax probability of any token it committed in the first block
(`Delta.first_block_confidence`). The rule (run by agent.guard.ClarifyGuard, ordered by
agent.pipeline):
  - a well-formed reply whose first block was committed with confidence >= `threshold` is kept;
  - otherwise the caller hears CLARIFY ("Sorry, was that about our hours, our prices, or an
    appointment?") or `replacement`'s better choice, never a blend and never the generic
    out-of-scope fallback.
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

from diffvoice.agent.thresholds import CLARIFY_BELOW

CLARIFY = "Sorry, was that about our hours, our prices, or an appointment?"
DEFAULT_THRESHOLD = CLARIFY_BELOW  # agent.thresholds
RETRY_AGREEMENT = 0.5
_WORD = re.compile(r"[a-z0-9]+")


def agrees(first: str, second: str, min_ratio: float = RETRY_AGREEMENT) -> bool:
    """Whether a careful retry `second` says what the blended reply `first` was mostly saying:
    difflib's ratio over their lower-cased words (2 * matches / total words) >= `min_ratio`."""
    a, b = _WORD.findall(first.lower()), _WORD.findall(second.lower())
    return bool(a and b) and difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() \
        >= min_ratio


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
