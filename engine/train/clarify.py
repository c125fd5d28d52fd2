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
DEFAULT_THRESHOLD = 0.5 was chosen on the template and dialogue held-out sets of an intermediate
checkpoint (step ~1200 of the v2 run), never on the independent set: raising it from 0 to 0.5
turned 2.5% of all replies from wrong answers into clarifying questions at a cost of 1.2% right
answers; each further 0.1 costs about as many right answers as it saves wrong ones.
Knows nothing about models or tokenizers.
"""

from __future__ import annotations

from collections.abc import Callable

CLARIFY = "Sorry, was that about our hours, our prices, or an appointment?"
DEFAULT_THRESHOLD = 0.5


def guard(text: str, first_block_confidence: float | None,
          is_well_formed: Callable[[str], bool], threshold: float = DEFAULT_THRESHOLD
          ) -> tuple[str, bool]:
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    unsure = first_block_confidence is not None and first_block_confidence < threshold
    if unsure or not is_well_formed(text):
        return CLARIFY, True
    return text, False


def served(text: str, first_block_confidence: float | None, messages: list[dict],
           is_well_formed: Callable[[str], bool], is_flow_reply: Callable[[str], bool] | None,
           result_reply: Callable[[str, dict, dict], str | None] | None,
           threshold: float = DEFAULT_THRESHOLD, grounding: bool = True,
           slot_question: Callable[[list[dict]], str | None] | None = None,
           next_question: Callable[[list[dict]], str | None] | None = None
           ) -> tuple[str, bool, str | None]:
    """(what the caller hears, clarified, grounding's `how`) for a whole text reply, as the
    server's guard (voice/receptionist/clarify.py, whole-reply mode) decides it: grounding
    (engine.train.grounding), then `guard`; a clarified reply after a tool result becomes the
    trained result reply when there is one; mid-booking, `slot_question(messages)` (the next
    slot-filling question, engine.train.dialogues.Dialogues.slot_question) when it gives one;
    else CLARIFY. `next_question` is grounding's (engine.train.grounding.ground)."""
    from diffvoice.engine.train.grounding import ground

    how = None
    if grounding and is_flow_reply is not None:
        text, how = ground(text, messages, is_flow_reply, result_reply, next_question)
    final, clarified = guard(text, first_block_confidence, is_well_formed, threshold)
    if clarified:
        final = replacement(messages, result_reply, slot_question)
    return final, clarified, how


def replacement(messages: list[dict] | None,
                result_reply: Callable[[str, dict, dict], str | None] | None,
                slot_question: Callable[[list[dict]], str | None] | None,
                question: str = CLARIFY) -> str:
    """What replaces an unsure reply to `messages`: after a tool result, the trained result
    reply; mid-booking, the next slot question; else `question`."""
    from diffvoice.engine.train.grounding import last_call

    if not messages:
        return question
    last = last_call(messages)
    if last is not None:
        reply = result_reply(*last) if result_reply is not None else None
    else:
        reply = slot_question(messages) if slot_question is not None else None
    return reply or question
