"""Issue 12, problem 7: every call's Silero VAD shares one ONNX session (no 200 ms / few-MB model
load per call) and scores audio exactly as pipecat's own analyzer does, state kept per call."""

import numpy as np
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams

from diffvoice.voice.vad import make_vad, shared_session


def _windows(seed: int, n: int):
    rng = np.random.default_rng(seed)
    t = np.arange(512) / 16000
    for i in range(n):  # silence, noise and a voiced-like tone, mixed
        x = rng.standard_normal(512) * 2000 * (i % 3) + 8000 * np.sin(2 * np.pi * 180 * t) * (
            i % 5 == 0)
        yield np.clip(x, -32768, 32767).astype(np.int16).tobytes()


def _scores(vad, seed, n=60):
    vad.set_sample_rate(16000)
    return [float(np.asarray(vad.voice_confidence(w)).ravel()[0]) for w in _windows(seed, n)]


def test_shared_vad_matches_pipecat_and_keeps_state_per_call():
    reference = _scores(SileroVADAnalyzer(), seed=1)
    a, b = make_vad(VADParams(stop_secs=0.4)), make_vad()
    assert a._model.session is b._model.session is shared_session()
    assert a._model is not b._model  # recurrent state is per call
    # interleave two calls on the shared session: each still matches its own reference
    scores_a, scores_b = [], []
    a.set_sample_rate(16000)
    b.set_sample_rate(16000)
    for wa, wb in zip(_windows(1, 60), _windows(2, 60), strict=True):
        scores_a.append(float(np.asarray(a.voice_confidence(wa)).ravel()[0]))
        scores_b.append(float(np.asarray(b.voice_confidence(wb)).ravel()[0]))
    assert np.allclose(scores_a, reference, atol=1e-6)
    assert np.allclose(scores_b, _scores(SileroVADAnalyzer(), seed=2), atol=1e-6)
    assert a.params.stop_secs == 0.4


async def test_calls_share_one_analysis_pool_and_states_match_pipecats_own(speech):
    """Every call's analysis runs on one shared pool (not a thread per call); one call's cleanup
    leaves the pool to the others; two interleaved calls get exactly the VAD states pipecat's own
    analyzer (with its own thread) gives each stream alone."""
    import asyncio

    from diffvoice.voice.vad import EXECUTOR_THREADS, shared_executor

    texts = {3: "do you take walk ins", 4: "i would like to book a cleaning on friday"}

    def frames(seed):  # 20 ms pieces of a stream: the analyzer buffers to its 512 windows
        pcm = speech(texts[seed], lead_silence=0.3, tail_silence=0.6)
        return [pcm[i:i + 640] for i in range(0, len(pcm), 640)]

    async def states(vad, seed):
        vad.set_sample_rate(16000)
        return [await vad.analyze_audio(f) for f in frames(seed)]

    reference = [await states(SileroVADAnalyzer(), s) for s in (3, 4)]
    a, b, gone = make_vad(), make_vad(), make_vad()
    assert a._executor is b._executor is gone._executor is shared_executor()
    assert shared_executor()._max_workers == EXECUTOR_THREADS
    await gone.cleanup()
    got = await asyncio.gather(states(a, 3), states(b, 4))
    assert got == reference
    assert all(any(s.name == "SPEAKING" for s in g) for g in got)  # each stream held speech
