"""SpeechTrackingVAD on real espeak-ng speech fed in 20 ms frames: the VAD's states are
Silero's, and the speech end it reports lies at the recording's true end of speech (from the
audio energy) within a few Silero windows, both as a stream position and as a wall time."""

from __future__ import annotations

import time

import numpy as np
from pipecat.audio.vad.vad_analyzer import VADParams, VADState

from diffvoice.latency_bench.corpus import speech_bounds
from diffvoice.voice.speech_vad import SpeechTrackingVAD


async def test_reports_where_and_when_speech_ended(speech):
    pcm = speech("what time do you open on saturday", lead_silence=0.3, tail_silence=1.0)
    _, true_end_s = speech_bounds(np.frombuffer(pcm, dtype=np.int16))
    vad = SpeechTrackingVAD(params=VADParams(stop_secs=0.2))
    vad.set_sample_rate(16000)
    states, arrival = [], {}
    for offset in range(0, len(pcm), 640):
        arrival[offset + 640] = time.time()
        states.append(await vad.analyze_audio(pcm[offset: offset + 640]))
    assert VADState.SPEAKING in states and states[-1] is VADState.QUIET
    assert not vad.hearing_speech
    # within ~3 Silero windows (32 ms) of the energy-based end of speech
    assert abs(vad.last_speech_pos_s - true_end_s) < 0.1
    # the wall time is when that stream position arrived (frames fed as fast as analysed)
    end_sample = int(round(vad.last_speech_pos_s * 16000))
    frame_end = min(k for k in arrival if k >= end_sample * 2)
    assert abs(vad.last_speech_t - arrival[frame_end]) < 0.5
    assert vad.speech_since(vad.last_speech_t - 1.0) and not vad.speech_since(time.time())


async def test_silence_is_counted_in_analysed_stream_time(speech):
    pcm = speech("where are you located", lead_silence=0.3, tail_silence=0.8)
    _, true_end_s = speech_bounds(np.frombuffer(pcm, dtype=np.int16))
    vad = SpeechTrackingVAD(params=VADParams(stop_secs=0.2))
    vad.set_sample_rate(16000)
    assert vad.silence_secs is None
    cut = int((true_end_s + 0.4) * 16000) * 2 // 640 * 640  # speech + 0.4 s of its silence
    for offset in range(0, cut, 640):
        await vad.analyze_audio(pcm[offset: offset + 640])
    assert 0.3 < vad.silence_secs < 0.45  # the silence analysed, not the wall time


def _phone_path(pcm: np.ndarray) -> bytes:
    """16 kHz speech as a Twilio caller's reaches the VAD: 8 kHz mu-law, back to 16 kHz."""
    import soxr

    from diffvoice.voice.telephony import mulaw

    narrow = soxr.resample(pcm.astype(np.float32) / 32768, 16000, 8000)
    heard = mulaw.decode(mulaw.encode((np.clip(narrow, -1, 1) * 32767).astype(np.int16)))
    wide = soxr.resample(np.asarray(heard, np.float32) / 32768, 8000, 16000)
    return (np.clip(wide, -1, 1) * 32767).astype(np.int16).tobytes()


async def test_one_short_word_over_the_phone_starts_speech_at_the_served_loudness_gate():
    """espeak-ng en-gb+m3 "yes" over the phone path: Silero is sure of it, but pipecat's
    loudness gate (min_volume 0.6, a smoothed loudness over 400 ms) rises too slowly for a
    word this short, so the VAD never confirmed it and the caller got no turn at all. The
    served gate (ServeConfig.vad_min_volume) confirms it."""
    from diffvoice.latency_bench.corpus import speech_only
    from diffvoice.latency_bench.speakers import Speaker, Synth
    from diffvoice.voice.config import ServeConfig

    word = speech_only(Synth(), Speaker("espeak", "en-gb+m3", 150), "yes")
    silence = np.zeros(8000, np.int16)
    pcm = _phone_path(np.concatenate([silence, word, silence, silence]))
    verdicts = {}
    for min_volume in (ServeConfig().vad_min_volume, 0.6):
        vad = SpeechTrackingVAD(params=VADParams(stop_secs=0.2, min_volume=min_volume))
        vad.set_sample_rate(16000)
        states = [await vad.analyze_audio(pcm[i: i + 640]) for i in range(0, len(pcm), 640)]
        verdicts[min_volume] = VADState.SPEAKING in states
    assert verdicts == {ServeConfig().vad_min_volume: True, 0.6: False}
