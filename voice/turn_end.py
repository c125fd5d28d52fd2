"""`MeaningTurnStopStrategy`: end the caller's turn at a short pause when what they said is
complete, by its words and (optionally) by its sound, and its eager draft is ready; otherwise after
the full silence window.

A pipecat 1.14 user-turn stop strategy (replaces SpeechTimeoutUserTurnStopStrategy). The VAD runs
with a short `stop_secs` (e.g. 0.2 s) so that it reports pauses; on each VAD stop this strategy
decides, polling every 10 ms:
* the caller resumed (VAD start) -> nothing ends; speech the VAD hears but has not confirmed yet
  (`hearing_speech()`, the analyser's STARTING state) holds the decision back too;
* a transcript is in and the turn is complete (below) and `draft_ready(text)` (when drafting is
  on: a draft for exactly this text is running or done, voice.drafting) -> the turn ends now
  ("fast"; the draft is promoted and streams as soon as it has text);
* `window_secs` of silence after the caller's last speech with a transcript in -> the turn ends
  ("window": pauses inside a sentence, "what time, um, do you open", stay within it).
  The silence is counted in stream time when `silence_heard()` gives it (the VAD's analysed
  audio since its last speech window, confirmed or not: a short "um" the VAD never confirmed
  restarts it, and a VAD lagging behind under load never counts silence it has not analysed);
  else in wall-clock time from `speech_end()` (VAD stop - stop_secs if unknown);
* a transcript in, but the VAD has not analysed the window's silence by
  `transcript_timeout_secs` after the wall-clock window -> the turn ends ("late": a VAD that far
  behind, or audio that stopped coming, must not leave the caller without an answer);
* no transcript, but the recogniser heard speech it made no words of (`UnheardSpeechFrame`,
  voice.asr.streaming_stt: a loud segment over half a second, e.g. a one-word answer Whisper
  heard as nothing) and the window is over -> the turn ends ("unheard") and the caller is asked
  to say it again (`reprompt`, spoken as the agent's words, at most `max_reprompts` times in a
  row: pipecat's EmptyUserTurnConfig default of one; the LLM is not asked);
* no transcript `transcript_timeout_secs` after the window -> nothing (noise is not a turn;
  pipecat's own stop watchdog still applies).

Complete, at a pause (`TurnSignals`, thresholds calibrated in docs/latency/turn-taking.md):
* words: `looks_complete(text)`, a small heuristic: at least two words, not ending on a filler, a
  conjunction, an article, a preposition or a trailing comma, and a question that opens with a
  question word has a verb ("what time" / "how much" are not questions yet); or, right after the
  agent asked a question (`asked()`: its last words end with "?"), a one-word answer that is not
  a filler ("tuesday", "yes", a name);
* sound (with `smart_turn`, voice.smart_turn: P(complete) of the turn's audio at this pause):
  complete words end the turn unless the sound says the caller is mid-thought
  (P < `signals.veto`).
Knows nothing about the engine.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    TranscriptionFrame,
    TTSSpeakFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.turns.types import ProcessFrameResult
from pipecat.turns.user_stop.base_user_turn_stop_strategy import BaseUserTurnStopStrategy

from diffvoice.voice.asr.streaming_stt import UnheardSpeechFrame

POLL_SECS = 0.01
# said when the caller spoke and the recogniser made no words of it; a question, so that a
# one-word answer after it is complete (looks_complete)
REPROMPT = "Sorry, I didn't catch that. Could you say it again?"

# Words a finished sentence rarely ends on: fillers, conjunctions, articles, prepositions,
# auxiliaries and question words waiting for the rest of the question.
INCOMPLETE_TAIL = frozenset(
    "um umm uh uhh er erm hmm mm ah and or but so because if then than that which who whose "
    "the a an my your our their this these those some any to of on in at for with from by "
    "about into like as is are was were do does did can could would will should what when "
    "where how why i you we it me there".split()
)
QUESTION_WORDS = frozenset("what when where how which who whose why".split())
# auxiliaries and the verbs a caller's question is built on (a wh-question without one of
# these is still going: "what time ...", "how much ...")
VERBS = frozenset(
    "is are was were am be do does did done can could will would should shall may might must "
    "have has had 's 're open opens opened close closes closed cost costs take takes taking "
    "need needs book booked cancel get offer offers work works accept accepts park start "
    "starts end ends see go come call pay charge located mean say help know want".split()
)
_WORD = re.compile(r"[a-z0-9']+(?:-[a-z0-9']+)*")  # "doo-o-o" (a stutter) is one word


def _words(text: str) -> list[str] | None:
    """The words, or None when the text ends on a comma, dash or ellipsis (more is coming)."""
    stripped = text.strip()
    if not stripped or stripped.endswith((",", "-", "...", "\u2026", ";", ":")):
        return None
    return _WORD.findall(stripped.lower().replace("\u2019", "'"))


def looks_complete(text: str, asked: str | None = None) -> bool:
    """Complete by its words; `asked`: the agent's last words (a question makes a one-word
    answer complete)."""
    words = _words(text)
    if not words or words[-1] in INCOMPLETE_TAIL:
        return False
    if len(words) == 1:
        return bool(asked) and asked.rstrip().endswith("?")
    if words[0] in QUESTION_WORDS:
        return any(w in VERBS or w.endswith(("'s", "'re")) for w in words[1:])
    return True


@dataclass(frozen=True)
class TurnSignals:
    """How the sound weighs in at a pause: complete words wait when P(complete) by sound is
    below `veto` (None: the words alone). 0.2 was chosen on the development set of
    `python -m diffvoice.latency_bench.turn_signals` (docs/latency/turn-taking.md); letting a
    sure sound end a turn whose words are not complete did not earn its place there (more false
    cut-offs for almost no earlier ends), so there is no such rule."""

    veto: float | None = 0.2

    def complete(self, words_complete: bool, p: float | None) -> bool:
        if not words_complete:
            return False
        return p is None or self.veto is None or p >= self.veto


class MeaningTurnStopStrategy(BaseUserTurnStopStrategy):
    def __init__(
        self,
        *,
        window_secs: float,
        stop_secs: float,
        speech_end: Callable[[], float | None] = lambda: None,
        hearing_speech: Callable[[], bool] = lambda: False,
        silence_heard: Callable[[], float | None] = lambda: None,
        draft_ready: Callable[[str], bool] | None = None,
        complete: Callable[..., bool] = looks_complete,
        asked: Callable[[], str | None] = lambda: None,
        smart_turn=None,
        signals: TurnSignals | None = None,
        transcript_timeout_secs: float = 3.0,
        reprompt: str | None = REPROMPT,
        max_reprompts: int = 1,
        clock: Callable[[], float] = time.time,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if window_secs < stop_secs:
            raise ValueError(f"window_secs ({window_secs}) must be >= stop_secs ({stop_secs})")
        self._window = window_secs
        self._stop_secs = stop_secs
        self._speech_end = speech_end
        self._hearing_speech = hearing_speech
        self._silence_heard = silence_heard
        self._draft_ready = draft_ready
        self._complete = complete
        self._asked = asked
        self._smart_turn = smart_turn  # voice.smart_turn.SmartTurn, or None: words alone
        self._signals = signals or TurnSignals()
        self._audio = None  # voice.smart_turn.TurnAudio, made at the first audio frame
        self._p: float | None = None  # P(complete) by sound at the last pause
        self._p_task: asyncio.Task | None = None
        self._transcript_timeout = transcript_timeout_secs
        self._reprompt = reprompt
        self._max_reprompts = max_reprompts
        self._reprompts_in_a_row = 0
        self._unheard = False  # the recogniser heard speech and no words this turn
        self._clock = clock
        self._text = ""
        self._vad_speaking = False
        self._task: asyncio.Task | None = None
        self.decisions: list[str] = []  # "fast" / "window" / "late" / "unheard" per ended turn
        self.reprompts = 0  # times the caller was asked to say it again
        self.waited_secs: list[float] = []  # VAD stop -> turn end, per ended turn
        self.sound: list[float | None] = []  # P(complete) by sound when each turn ended

    async def handle_user_turn_started(self):
        await self._reset()

    async def handle_user_turn_stopped(self):
        await self._reset()
        if self._audio is not None:
            self._audio.clear()  # the next turn is judged on its own sound

    async def cleanup(self):
        await super().cleanup()
        await self._cancel()
        await self._cancel_sound()

    async def _reset(self):
        self._text = ""
        self._unheard = False
        await self._cancel()

    async def _cancel_sound(self):
        self._p = None
        if self._p_task is not None:
            task, self._p_task = self._p_task, None
            await self.task_manager.cancel_task(task)

    async def _judge_sound(self) -> None:
        """P(complete) of the turn's audio so far (at this pause), off the event loop."""
        audio = self._audio
        try:
            self._p = await self._smart_turn.probability(audio.pcm(), audio.sample_rate)
        except Exception as e:  # the words still decide
            logger.warning(f"{self}: smart-turn failed ({e!r}); deciding on words alone")

    async def _cancel(self):
        if self._task is not None:
            task, self._task = self._task, None
            await self.task_manager.cancel_task(task)

    async def process_frame(self, frame: Frame) -> ProcessFrameResult:
        if isinstance(frame, InputAudioRawFrame):
            if self._smart_turn is not None and frame.audio:
                if self._audio is None:
                    from diffvoice.voice.smart_turn import TurnAudio

                    self._audio = TurnAudio(frame.sample_rate)
                self._audio.append(frame.audio)
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            self._vad_speaking = True
            await self._cancel()
            await self._cancel_sound()
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            self._vad_speaking = False
            if self._smart_turn is not None and self._audio is not None:
                await self._cancel_sound()
                self._p_task = self.task_manager.create_task(self._judge_sound(),
                                                             f"{self}::sound")
            await self._start(self._clock())
        elif isinstance(frame, TranscriptionFrame) and frame.text.strip():
            self._text = f"{self._text} {frame.text.strip()}".strip()
            if self._task is None and not self._vad_speaking:
                await self._start(self._clock())  # a transcript without a VAD stop
        elif isinstance(frame, UnheardSpeechFrame):
            self._unheard = True
            if self._task is None and not self._vad_speaking:
                await self._start(self._clock())  # the decision had given up waiting
        return ProcessFrameResult.CONTINUE

    async def _start(self, stop_t: float) -> None:
        await self._cancel()
        end = self._speech_end()
        if end is None or end > stop_t:
            end = stop_t - self._stop_secs
        self._task = self.task_manager.create_task(self._decide(stop_t, end),
                                                   f"{self}::decide")

    async def _decide(self, stop_t: float, speech_end_t: float) -> None:
        while True:
            now = self._clock()
            heard = self._speech_end()
            last_speech = max(speech_end_t, heard) if heard is not None else speech_end_t
            deadline = last_speech + self._window
            give_up = deadline + self._transcript_timeout
            silence = self._silence_heard()
            window_over = now >= deadline if silence is None else silence >= self._window
            held = self._hearing_speech()
            if self._text and not held:
                if self._complete_now() and (
                    self._draft_ready is None or self._draft_ready(self._text)
                ):
                    return await self._end("fast", now - stop_t)
                if window_over:
                    return await self._end("window", now - stop_t)
                if now >= give_up:  # the VAD is that far behind the wall clock, or stalled
                    logger.info(f"{self}: the VAD heard {silence or 0:.2f} s of silence in "
                                f"{now - last_speech:.2f} s; ending the turn on the clock")
                    return await self._end("late", now - stop_t)
            if self._unheard and not self._text and not held and window_over:
                return await self._end_unheard(now - stop_t)
            if now >= give_up and not held and not self._text:
                logger.info(f"{self}: no transcript {now - stop_t:.2f} s after the VAD stop")
                self._task = None
                return
            await asyncio.sleep(POLL_SECS)

    def _complete_now(self) -> bool:
        words = self._complete(self._text, self._asked())
        if self._smart_turn is None or not words:
            return words
        task = self._p_task
        if task is not None and not task.done():
            return False  # the sound's verdict is due within tens of ms: wait for it
        return self._signals.complete(words, self._p)

    async def _end_unheard(self, waited_secs: float) -> None:
        """Speech with no words: end the (empty) turn, then ask the caller to say it again."""
        ask = self._reprompt is not None and self._reprompts_in_a_row < self._max_reprompts
        logger.info(f"{self}: speech heard and no words {waited_secs:.3f} s after the VAD stop"
                    + ("; asking again" if ask else "; not asking again (asked already)"))
        await self._end("unheard", waited_secs)
        if ask:
            self._reprompts_in_a_row += 1
            self.reprompts += 1
            await self.push_frame(TTSSpeakFrame(self._reprompt))

    async def _end(self, how: str, waited_secs: float) -> None:
        logger.debug(f"{self}: turn ends ({how}) {waited_secs:.3f} s after the VAD stop: "
                     f"{self._text!r}")
        if how != "unheard":
            self._reprompts_in_a_row = 0
        self._task = None
        self.decisions.append(how)
        self.waited_secs.append(waited_secs)
        self.sound.append(self._p)
        await self.trigger_user_turn_stopped()
