"""One measured user turn, and how the report's stages are derived from it.

Contract:
- `TurnResult` holds what a load client observed for one prompt: the ground-truth end of user
  speech (`speech_end_t`, client clock, from the audio), the server's latency event (browser
  protocol only), the playout times of the bot's answer (latency_bench.playout), and a status:
  "ok", "error" or "timeout" with a message. Failed turns are kept and counted, never dropped.
- `TurnResult.stages(shared_clock)` derives the report stages in milliseconds (only those that
  could be measured this turn):
    voice_to_voice_ms  = first audible bot sample played at the client - end of user speech
    endpointing_ms     = server turn_end_t (the user turn ended; vad_stop_t from servers that
                         do not send it) - end of user speech          (shared_clock: loopback)
                       = the server's own endpointing_ms measurement   (otherwise)
    asr_ms, llm_ttft_ms, tts_first_audio_ms, server_ms  = the server's latency event
    speech_stopped_to_audio_ms = (Realtime) input_audio_buffer.speech_stopped -> the first
                         response.output_audio.delta, both as the client received them
  All times are epoch seconds (`time.time()`); a loopback client shares the server's clock.
- `premature_eot`: the server ended the user turn (latency event, bot audio, or its turn_end_t)
  before the prompt's last speech — the caller was cut off; such a turn is also an "error".
- `timeline`: what the client received during the turn, as [seconds since the prompt began
  streaming, what] pairs (browser protocol: final transcripts, bot text, bot started / stopped,
  flushes, latency events with their user_turn_ends, the first bot audio frame): the evidence a
  failed turn is reported with.
- `kind`, `pauses_ms` and `dialogue` are copied from the prompt (latency_bench.corpus.Prompt):
  what the caller said, so the report can count cut-offs per pause length and slot answers
  apart.
- `planned_turn(prompt, concurrency, session, turn)` is the record before anything is measured.
- `to_dict()` is the JSON form stored in a report's optional `turns` list.

Knows nothing about sockets, protocols or report files.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from diffvoice.latency_bench.corpus import Prompt

SERVER_STAGE_FIELDS = ("asr_ms", "llm_ttft_ms", "tts_first_audio_ms", "server_ms",
                       "speech_stopped_to_audio_ms")  # the last: Realtime clients only
SERVER_TIMESTAMPS = ("vad_stop_t", "transcript_final_t", "llm_first_text_t", "tts_first_audio_t",
                     "first_audio_sent_t")
STATUSES = ("ok", "error", "timeout")


@dataclass
class TurnResult:
    concurrency: int
    session: int
    turn: int
    prompt: str
    status: str = "ok"
    message: str | None = None
    speech_end_t: float | None = None
    server: dict[str, Any] = field(default_factory=dict)   # the "latency" event's fields
    transcript: str | None = None                          # final transcript event text
    bot_text: str = ""                                      # concatenated bot.text deltas
    first_frame_t: float | None = None
    first_audible_t: float | None = None
    last_frame_t: float | None = None
    last_audible_end_t: float | None = None
    send_lag_ms: float = 0.0                                # worst lateness of our 20 ms pacing
    voice: str | None = None                                # the prompt's voice
    kind: str = "question"                                  # the prompt's kind (corpus.KINDS)
    pauses_ms: tuple[int, ...] = ()                         # silences inside the prompt
    dialogue: str | None = None                             # dialogue id (consecutive turns)
    premature_eot: bool = False                             # the server answered or ended the
                                                            # turn before the prompt's last speech
    timeline: list = field(default_factory=list)            # [s since the prompt began, event]
                                                            # as the client saw them (browser)

    def fail(self, status: str, message: str) -> None:
        if status not in ("error", "timeout"):
            raise ValueError(f"fail() status must be 'error' or 'timeout', got {status!r}")
        self.status, self.message = status, message

    def stages(self, shared_clock: bool) -> dict[str, float]:
        """The report stages measured in this turn (ms); empty for a failed turn."""
        if self.status != "ok":
            return {}
        out: dict[str, float] = {}
        if self.first_audible_t is not None and self.speech_end_t is not None:
            out["voice_to_voice_ms"] = (self.first_audible_t - self.speech_end_t) * 1000.0
        turn_end_t = self.server.get("turn_end_t") or self.server.get("vad_stop_t")
        if shared_clock and turn_end_t is not None and self.speech_end_t is not None:
            out["endpointing_ms"] = (turn_end_t - self.speech_end_t) * 1000.0
        elif _number(self.server.get("endpointing_ms")):
            out["endpointing_ms"] = float(self.server["endpointing_ms"])
        for name in SERVER_STAGE_FIELDS:
            if _number(self.server.get(name)):
                out[name] = float(self.server[name])
        return out

    def to_dict(self, shared_clock: bool) -> dict[str, Any]:
        data = asdict(self)
        data["stages"] = self.stages(shared_clock)
        return data


def planned_turn(prompt: Prompt, concurrency: int, session: int, turn: int) -> TurnResult:
    """The record of a turn about to be played: who says what, nothing measured yet."""
    return TurnResult(concurrency=concurrency, session=session, turn=turn,
                      prompt=prompt.text or prompt.name, voice=prompt.voice, kind=prompt.kind,
                      pauses_ms=tuple(prompt.pauses_ms), dialogue=prompt.dialogue)


def _number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))
