"""`TurnTracker`: watches frames at four taps of one session's pipeline and turns them into
browser events and one latency record per bot turn.

Taps (see voice.pipeline): "stt" (between ASR and the user aggregator: transcripts downstream,
VAD frames broadcast upstream by the aggregator), "llm" (after the LLM: response start, text,
end), "tts" (after TTS: synthesized audio), "out" (after the output transport: audio frames
that were written to the client, bot started/stopped speaking, interruptions).

A turn starts at LLMFullResponseStartFrame and takes the user side (last VAD stop, last final
transcript, text) gathered since the previous turn. Its record is emitted when its first audio
frame has been sent, or — without audio — when the turn is interrupted, ends empty, or the next
turn/session end arrives. `endpointing_ms` is what the server can know: stop_secs plus one VAD
analysis window (the quantisation of Silero's 512-sample frames); the caller's true end of speech
is not observable server-side.

Knows nothing about sockets or encoding: it calls `emit(event)` and `record_sink(record)`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

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
    VADUserStoppedSpeakingFrame,
)

from voice.transport import protocol

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
    llm_first_text_t: float | None = None
    tts_first_audio_t: float | None = None
    first_audio_sent_t: float | None = None
    bot_text: str = ""
    llm_done: bool = False
    reported: bool = False


class TurnTracker:
    def __init__(
        self,
        *,
        session_id: str,
        stop_secs: float,
        emit: Emit | None = None,
        record_sink: RecordSink | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
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
        if isinstance(frame, LLMFullResponseStartFrame):
            await self._finish(interrupted=False)
            self._turns += 1
            self._turn = _Turn(
                number=self._turns,
                vad_stop_t=self._vad_stop_t,
                transcript_final_t=self._transcript_t,
                user_text=" ".join(self._user_text),
            )
            self._vad_stop_t = self._transcript_t = None
            self._user_text = []
        elif isinstance(frame, LLMTextFrame) and self._turn is not None:
            if frame.text:
                if self._turn.llm_first_text_t is None:
                    self._turn.llm_first_text_t = now
                self._turn.bot_text += frame.text
                await self._send(protocol.BotText(text=frame.text))
        elif isinstance(frame, LLMFullResponseEndFrame) and self._turn is not None:
            self._turn.llm_done = True
            if not self._turn.bot_text.strip():
                await self._finish(interrupted=False)

    async def _on_out(self, frame: Frame, now: float) -> None:
        if isinstance(frame, OutputAudioRawFrame):
            self._audio_since_flush = True
            if self._turn is not None and self._turn.first_audio_sent_t is None:
                self._turn.first_audio_sent_t = now
                await self._finish(interrupted=False)
        elif isinstance(frame, BotStartedSpeakingFrame):
            await self._send(protocol.BotStartedSpeaking())
        elif isinstance(frame, BotStoppedSpeakingFrame):
            await self._send(protocol.BotStoppedSpeaking())
        elif isinstance(frame, InterruptionFrame):
            if self._audio_since_flush:
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
        endpointing_ms = round((self.stop_secs + VAD_WINDOW_SECS) * 1000.0, 2)
        latency = protocol.Latency(
            turn=turn.number,
            session_id=self.session_id,
            stop_secs=self.stop_secs,
            vad_stop_t=turn.vad_stop_t,
            transcript_final_t=turn.transcript_final_t,
            llm_first_text_t=turn.llm_first_text_t,
            tts_first_audio_t=turn.tts_first_audio_t,
            first_audio_sent_t=turn.first_audio_sent_t,
            endpointing_ms=endpointing_ms if turn.vad_stop_t is not None else None,
            asr_ms=_ms(turn.vad_stop_t, turn.transcript_final_t),
            llm_ttft_ms=_ms(turn.transcript_final_t, turn.llm_first_text_t),
            tts_first_audio_ms=_ms(turn.llm_first_text_t, turn.tts_first_audio_t),
            server_ms=_ms(turn.vad_stop_t, turn.first_audio_sent_t),
            interrupted=interrupted,
            user_text=turn.user_text,
            bot_text=turn.bot_text,
        )
        record = asdict(latency)
        return record
