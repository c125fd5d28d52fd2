"""`TurnTracker`: watches frames at four taps of one session's pipeline and turns them into
browser events and one latency record per bot turn.

Taps (see voice.pipeline): "stt" (between ASR and the user aggregator: transcripts downstream,
VAD frames broadcast upstream by the aggregator), "llm" (after the LLM: response start, text,
end), "tts" (after TTS: synthesized audio), "out" (after the output transport: audio frames
that were written to the client, bot started/stopped speaking, interruptions).

A turn starts at LLMFullResponseStartFrame, or at a TTSSpeakFrame (the turn strategy asking the
caller to say it again when their speech gave no words: a turn with `reprompt` set and no LLM
stages), and takes the user side (last VAD stop, last final
transcript, text) gathered since the previous turn. Its record is emitted when its first audio
frame has been sent, or — without audio — when the turn is interrupted, ends empty, or the next
turn/session end arrives; its `bot_text` is the answer text known at that moment (the text that
is being spoken first; later deltas follow as `bot.text` events). `endpointing_ms` is measured:
from the caller's end of speech as the audio shows it (`speech_end_t`: the VAD's last speech
window, voice.speech_vad) to the moment the
user turn ended (`turn_end_t`: UserStoppedSpeakingFrame); without a speech-tracking VAD it is
None, never assumed. Each record also says whether the answer came from an eager draft
(`draft_hit`), how many drafts the turn started (`drafts`) and the engine passes spent on drafts
that were thrown away (`extra_passes`), and whether the answer's first text was ready when the
turn ended (`answer_ready`) and how long before the turn's end that draft started
(`draft_lead_ms`), from `turn_info()` (voice.llm_service); `user_turn_ends` counts the
user turns that ended since the previous answer began (2 or more: a turn was cut in two and the
first part's answer never reached the caller). An answer that calls a tool (and says nothing)
does not end its turn: the tool result's re-prompt is the same turn (`tool_calls` counts the
calls; one record per answer the caller hears, timed from the caller's end of speech to the
outcome). `playback.flush`
is sent at an interruption only while bot audio may still be playing at the client (the bot is
speaking, or audio sent recently is not yet played out).

Knows nothing about sockets or encoding: it calls `emit(event)` and `record_sink(record)`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    Frame,
    InterimTranscriptionFrame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    OutputAudioRawFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    UserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)

from diffvoice.voice.transport import protocol

VAD_WINDOW_SECS = 512 / 16000  # Silero analyses 512-sample windows at 16 kHz

Emit = Callable[[protocol.Event], Awaitable[None]]
RecordSink = Callable[[dict], Awaitable[None]]


def _ms(start: float | None, end: float | None) -> float | None:
    if start is None or end is None or end < start:
        return None
    return round((end - start) * 1000.0, 2)


@dataclass
class _Turn:
    number: int
    vad_stop_t: float | None
    transcript_final_t: float | None
    user_text: str
    speech_end_t: float | None = None
    turn_end_t: float | None = None
    draft_info: object | None = None  # voice.llm_service.AnswerInfo (read when reported)
    user_turn_ends: int = 0
    llm_first_text_t: float | None = None
    tts_first_audio_t: float | None = None
    first_audio_sent_t: float | None = None
    bot_text: str = ""
    llm_done: bool = False
    reported: bool = False
    tool_calls: int = 0
    tool_pending: bool = False  # an answer called a tool: its re-prompt continues this turn
    answers: list = field(default_factory=list)  # AnswerInfo of each engine answer of the turn
    reprompt: bool = False  # the agent asked the caller to say it again (no words were heard)


class TurnTracker:
    def __init__(
        self,
        *,
        session_id: str,
        stop_secs: float,
        emit: Emit | None = None,
        record_sink: RecordSink | None = None,
        clock: Callable[[], float] = time.time,
        speech_end: Callable[[], float | None] | None = None,
        turn_info: Callable[[], object] | None = None,
    ) -> None:
        self._speech_end = speech_end
        self._turn_info = turn_info
        self._speech_end_t: float | None = None
        self._turn_end_t: float | None = None
        self._turn_ends = 0  # user turns ended since the last answer started
        self._bot_speaking = False
        self._playing_until = 0.0  # client clock estimate: when the audio sent so far ends
        self.session_id = session_id
        self.stop_secs = stop_secs
        self._emit = emit
        self._record_sink = record_sink
        self._clock = clock
        self._turns = 0
        self._turn: _Turn | None = None
        # user side since the last bot turn started
        self._vad_stop_t: float | None = None
        self._transcript_t: float | None = None
        self._user_text: list[str] = []
        self._audio_since_flush = False
        self.records: list[dict] = []

    async def _send(self, event: protocol.Event) -> None:
        if self._emit is not None:
            await self._emit(event)

    async def on_frame(self, where: str, frame: Frame, _direction=None) -> None:
        now = self._clock()
        if where == "stt":
            await self._on_stt(frame, now)
        elif where == "llm":
            await self._on_llm(frame, now)
        elif where == "tts":
            if (
                isinstance(frame, TTSAudioRawFrame)
                and self._turn
                and not self._turn.tts_first_audio_t
            ):
                self._turn.tts_first_audio_t = now
        elif where == "out":
            await self._on_out(frame, now)

    async def _on_stt(self, frame: Frame, now: float) -> None:
        if isinstance(frame, VADUserStoppedSpeakingFrame):
            self._vad_stop_t = now
            end = self._speech_end() if self._speech_end is not None else None
            self._speech_end_t = end if end is not None and end <= now else None
        elif isinstance(frame, UserStoppedSpeakingFrame):
            self._turn_end_t = now
            self._turn_ends += 1
        elif isinstance(frame, TranscriptionFrame):
            text = frame.text.strip()
            if text:
                self._transcript_t = now
                self._user_text.append(text)
                await self._send(protocol.Transcript(text=text, final=True))
        elif isinstance(frame, InterimTranscriptionFrame):
            if frame.text.strip():
                await self._send(protocol.Transcript(text=frame.text.strip(), final=False))

    async def _on_llm(self, frame: Frame, now: float) -> None:
        if isinstance(frame, TTSSpeakFrame):  # spoken without the LLM: the turn strategy's
            await self._start_turn(None)  # "say it again" (voice.turn_end), a turn of its own
            self._turn.reprompt = True
            self._turn.bot_text = frame.text
            self._turn.llm_done = True
            await self._send(protocol.BotText(text=frame.text))
        elif isinstance(frame, LLMFullResponseStartFrame):
            info = self._turn_info() if self._turn_info is not None else None
            if self._turn is not None and self._turn.tool_pending and getattr(
                    info, "after_tool", False):
                self._turn.tool_pending = False  # the tool's result re-prompted: same turn
                self._turn.llm_done = False
                self._turn.answers.append(info)
                return
            await self._start_turn(info)
        elif isinstance(frame, LLMTextFrame) and self._turn is not None:
            if frame.text:
                if self._turn.llm_first_text_t is None:
                    self._turn.llm_first_text_t = now
                self._turn.bot_text += frame.text
                await self._send(protocol.BotText(text=frame.text))
        elif isinstance(frame, LLMFullResponseEndFrame) and self._turn is not None:
            turn = self._turn
            turn.llm_done = True
            answer = turn.answers[-1] if turn.answers else None
            if getattr(answer, "tool_call", None) and not turn.tool_pending:
                turn.tool_calls += 1  # its result comes back as a re-prompt
                turn.tool_pending = True
            elif not turn.bot_text.strip():
                await self._finish(interrupted=False)

    async def _start_turn(self, info) -> None:
        """A bot turn begins: report the one before, take the user side gathered since."""
        await self._finish(interrupted=False)
        self._turns += 1
        self._turn = _Turn(
            number=self._turns,
            vad_stop_t=self._vad_stop_t,
            transcript_final_t=self._transcript_t,
            user_text=" ".join(self._user_text),
            speech_end_t=self._speech_end_t,
            turn_end_t=self._turn_end_t,
            draft_info=info,
            user_turn_ends=self._turn_ends,
            answers=[info] if info is not None else [],
        )
        self._turn_ends = 0
        self._vad_stop_t = self._transcript_t = None
        self._speech_end_t = self._turn_end_t = None
        self._user_text = []

    async def _on_out(self, frame: Frame, now: float) -> None:
        if isinstance(frame, OutputAudioRawFrame):
            self._audio_since_flush = True
            rate = frame.sample_rate or 16000
            seconds = len(frame.audio) / (2 * rate * max(1, frame.num_channels or 1))
            self._playing_until = max(self._playing_until, now) + seconds
            if self._turn is not None and self._turn.first_audio_sent_t is None:
                self._turn.first_audio_sent_t = now
                await self._finish(interrupted=False)
        elif isinstance(frame, BotStartedSpeakingFrame):
            self._bot_speaking = True
            await self._send(protocol.BotStartedSpeaking())
        elif isinstance(frame, BotStoppedSpeakingFrame):
            self._bot_speaking = False
            await self._send(protocol.BotStoppedSpeaking())
        elif isinstance(frame, InterruptionFrame):
            if self._turn is not None:
                self._turn.tool_pending = False  # a re-prompt after a barge-in is a new turn
            audible = self._bot_speaking or now < self._playing_until
            if self._audio_since_flush and audible:
                self._audio_since_flush = False
                await self._send(protocol.PlaybackFlush())
            await self._finish(interrupted=True)

    async def close(self) -> None:
        """Session ended: report a turn still waiting for audio."""
        await self._finish(interrupted=False)

    async def _finish(self, *, interrupted: bool) -> None:
        turn = self._turn
        if turn is None or turn.reported:
            return
        turn.reported = True
        record = self.make_record(turn, interrupted=interrupted and turn.first_audio_sent_t is None)
        self.records.append(record)
        if self._record_sink is not None:
            await self._record_sink(record)
        await self._send(protocol.Latency(**record))

    def make_record(self, turn: _Turn, *, interrupted: bool) -> dict:
        turn_end_t = turn.turn_end_t or turn.vad_stop_t
        info = turn.draft_info.as_dict() if turn.draft_info is not None else {}
        latency = protocol.Latency(
            turn=turn.number,
            session_id=self.session_id,
            stop_secs=self.stop_secs,
            vad_stop_t=turn.vad_stop_t,
            transcript_final_t=turn.transcript_final_t,
            llm_first_text_t=turn.llm_first_text_t,
            tts_first_audio_t=turn.tts_first_audio_t,
            first_audio_sent_t=turn.first_audio_sent_t,
            endpointing_ms=_ms(turn.speech_end_t, turn_end_t),
            asr_ms=_ms(turn.vad_stop_t, turn.transcript_final_t),
            llm_ttft_ms=_ms(turn.transcript_final_t, turn.llm_first_text_t),
            tts_first_audio_ms=_ms(turn.llm_first_text_t, turn.tts_first_audio_t),
            server_ms=_ms(turn.vad_stop_t, turn.first_audio_sent_t),
            interrupted=interrupted,
            user_text=turn.user_text,
            bot_text=turn.bot_text,
            speech_end_t=turn.speech_end_t,
            turn_end_t=turn_end_t,
            draft_hit=info.get("draft_hit"),
            drafts=info.get("drafts"),
            extra_passes=info.get("extra_passes"),
            answer_passes=(sum(a.passes for a in turn.answers) if len(turn.answers) > 1
                           else info.get("answer_passes")),
            tool_calls=turn.tool_calls,
            reprompt=turn.reprompt,
            user_turn_ends=turn.user_turn_ends,
            answer_ready=None if info.get("draft_hit") is None else bool(
                info.get("draft_ready_t") and turn_end_t and info["draft_ready_t"] <= turn_end_t),
            draft_lead_ms=None if info.get("draft_started_t") is None or turn_end_t is None
            else round((turn_end_t - info["draft_started_t"]) * 1000.0, 2),
        )
        record = asdict(latency)
        return record
