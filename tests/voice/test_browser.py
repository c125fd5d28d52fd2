"""The browser page (web/) in real headless Chromium against the real diffvoice server.

Chromium's fake microphone plays a spoken WAV (espeak-ng + sox); the test clicks the mic button
like a user and checks what the page shows and plays against the frames the server actually sent
(captured from the WebSocket by playwright): the final transcript, the bot's text, every bot
audio sample played to the end, a latency row with stop_secs; then it stops the server and checks
the page says the connection dropped. Smaller tests cover a denied microphone, an unreachable
server and the playback flush in the browser's own Web Audio.

Screenshots go to artifacts/browser/ (git-ignored); their paths are printed.
Skipped with the reason when Chromium (/usr/bin/chromium), espeak-ng, sox or playwright is missing
(`make system-deps` installs the Debian packages).
"""

from __future__ import annotations

import json
import math

import pytest
from browser_harness import (
    CHROMIUM,
    REPO_ROOT,
    LoopbackServer,
    artifacts_dir,
    chromium_args,
    make_spoken_wav,
    missing_tools,
    timeout_scale,
)
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.staticfiles import StaticFiles

_missing = missing_tools()
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(bool(_missing), reason=f"browser test needs: {', '.join(_missing)}"),
]

# one breath, no comma: the VAD must hear a single turn (a pause could split it in two)
SPOKEN_TEXT = "Hello what time do you open tomorrow morning"
STOP_SECS = 0.5
UNIT_MS = 1000 * timeout_scale()  # every wait below is a multiple of this


def _ms(units: float) -> float:
    return units * UNIT_MS


@pytest.fixture(scope="module")
def spoken_wav(tmp_path_factory):
    return make_spoken_wav(tmp_path_factory.mktemp("mic") / "caller.wav", SPOKEN_TEXT)


@pytest.fixture
def playwright_driver():
    """Per test: sync playwright keeps an event loop marked running on this thread while it is
    open, and fixtures such as conftest's `random_engine` call asyncio.run() in their setup."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        yield driver


def _launch(driver, args):
    return driver.chromium.launch(executable_path=str(CHROMIUM), args=args)


class PageWatch:
    """Collects page errors and the WebSocket frames the page received."""

    def __init__(self, page):
        self.errors: list[str] = []
        self.events: list[dict] = []
        self.audio_bytes = 0
        self.audio_frames = 0
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on("console", self._console)
        page.on("websocket", self._socket)

    def _console(self, message):
        if message.type == "error":
            self.errors.append(f"console.error: {message.text}")

    def _socket(self, ws):
        ws.on("framereceived", self._frame)

    def _frame(self, payload):
        if isinstance(payload, (bytes, bytearray)):
            self.audio_frames += 1
            self.audio_bytes += len(payload)
        else:
            self.events.append(json.loads(payload))

    def of_type(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]


def _state(page) -> dict:
    return page.evaluate("JSON.parse(JSON.stringify(window.diffvoice))")


def _screenshot(page, name: str) -> None:
    path = artifacts_dir() / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def _wait_until(page, predicate, timeout_ms: float) -> None:
    """Poll a Python-side condition while letting the page run."""
    waited = 0.0
    while not predicate():
        assert waited < timeout_ms, f"condition not met within {timeout_ms:.0f} ms"
        page.wait_for_timeout(100)
        waited += 100


def _static_web_app() -> Starlette:
    """Serves web/ and an /agent with no card (what the page asks for on load; a 404 would be a
    console error): no /ws, i.e. a page whose voice server is not there."""
    app = Starlette()
    app.add_route("/agent", lambda request: JSONResponse({"model": None, "examples": []}))
    app.mount("/", StaticFiles(directory=REPO_ROOT / "web", html=True))
    return app


# ----------------------------------------------------------------------------- without the agent


def test_unreachable_server_is_explained(playwright_driver, spoken_wav):
    """The page loads but nothing answers on /ws: the user is told the server is unreachable."""
    browser = _launch(playwright_driver, chromium_args(spoken_wav))
    try:
        with LoopbackServer(_static_web_app()) as static:
            page = browser.new_page(viewport={"width": 1100, "height": 800})
            watch = PageWatch(page)
            page.goto(static.url + "/")
            page.click("#mic")
            page.wait_for_function("window.diffvoice.status === 'error'", timeout=_ms(30))
            state = _state(page)
            assert state["notice"]["kind"] == "unreachable"
            notice = page.locator("#notice")
            assert notice.is_visible()
            assert f"ws://127.0.0.1:{static.port}/ws" in notice.inner_text()
            assert "Cannot reach the voice server" in notice.inner_text()
            # the button offers a retry and nothing was captured or sent
            assert page.locator("#mic-label").inner_text() == "Try again"
            assert state["audio"]["framesSent"] == 0
            assert [e for e in watch.errors if "WebSocket" not in e] == []
            _screenshot(page, "unreachable")
    finally:
        browser.close()


FLUSH_SCENARIO = """
async () => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const { Player } = await import("/player.js");
  const ctx = window.__ctx;  // made in the click handler: a user gesture may start audio
  await ctx.resume();
  const player = new Player(ctx);
  const rate = 22050, chunk = Math.round(rate * 0.04);  // 40 ms chunks
  player.setRate(rate);
  const starts = [];
  for (let c = 0; c < 50; c++) {  // 2 s of a 440 Hz tone, arriving all at once
    const pcm = new Int16Array(chunk);
    for (let i = 0; i < chunk; i++) {
      pcm[i] = Math.round(8000 * Math.sin(2 * Math.PI * 440 * (c * chunk + i) / rate));
    }
    player.enqueue(pcm.buffer);
    starts.push(player.lastStartTime);
  }
  await sleep(400);
  const before = { ...player.stats, queued: player.queuedSecs(), now: ctx.currentTime };
  const dropped = player.flush();
  await sleep(500);
  const after = { ...player.stats, queued: player.queuedSecs(), playing: player.playing };
  const pcm = new Int16Array(chunk).fill(1000);
  const restartDelay = player.enqueue(pcm.buffer);
  await sleep(400);
  return { starts, before, dropped, after, restartDelay, final: { ...player.stats } };
}
"""


def test_playback_queue_is_gap_free_and_flushes_at_once(playwright_driver):
    """Player in Chromium's Web Audio: chunks scheduled back to back; flush silences the queue."""
    browser = _launch(playwright_driver, chromium_args())
    try:
        with LoopbackServer(_static_web_app()) as static:
            page = browser.new_page()
            watch = PageWatch(page)
            page.goto(static.url + "/")
            page.evaluate(
                "document.body.addEventListener('click', () => "
                "{ window.__ctx = new AudioContext(); }, { once: true, capture: true })"
            )
            page.mouse.click(5, 5)  # a real user gesture, as the mic button gets
            result = page.evaluate(FLUSH_SCENARIO)
    finally:
        browser.close()
    starts = result["starts"]
    # back to back: each 40 ms chunk starts where the previous one ends (no gap, no overlap)
    chunk_secs = round(22050 * 0.04) / 22050
    steps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert all(abs(s - chunk_secs) < 1e-9 for s in steps), steps
    before, after = result["before"], result["after"]
    # ~400 ms into a 2 s queue (longer on a loaded machine: timers run late, the audio clock
    # does not): the chunks played are those the audio clock has passed (their `ended` events
    # may lag it by a chunk or two), and audio is still queued for the flush to drop
    passed = sum(start + chunk_secs <= before["now"] + 1e-6 for start in starts)
    assert 3 <= before["chunksPlayed"] and passed - 2 <= before["chunksPlayed"] <= passed, \
        (before, passed)
    assert before["queued"] > 0.2, before
    assert before["peakPlayed"] > 0.2  # the tone (8000/32768) really went out
    # flush: everything still queued is dropped and nothing more plays out
    assert result["dropped"] == 50 - before["chunksPlayed"]
    assert after["chunksPlayed"] == before["chunksPlayed"]
    assert after["chunksFlushed"] == result["dropped"]
    assert after["flushes"] == 1
    assert after["queued"] == 0 and after["playing"] is False
    # the next chunk starts right away (a fresh queue), not after the dropped audio
    assert result["restartDelay"] < 0.2
    assert result["final"]["chunksPlayed"] == before["chunksPlayed"] + 1
    assert watch.errors == []


# ----------------------------------------------------------------------------- with the agent


@pytest.fixture(scope="module")
def voice_state(random_engine, tmp_path_factory):
    """The real server state: random-weight diffusion LLM (conftest's `random_engine`), espeak
    TTS, and `--asr auto` on a machine where no Whisper model is found (the lookup is pointed
    at none), so the server falls back to pocketsphinx and warns, and the page must show that
    warning."""
    import diffvoice.voice.asr.resolve as resolve
    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.state import AppState

    tmp = tmp_path_factory.mktemp("browser-server")
    config = ServeConfig(
        port=0,
        model="random-sdar",
        device="cpu",
        asr="auto",
        stop_secs=0.8,  # the page asks for STOP_SECS in session.start; the row must show that
        max_new_tokens=16,
        max_sessions=4,
        latency_log=str(tmp / "turns.jsonl"),
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(resolve, "_local_candidates", lambda: [])
        mp.setattr(resolve, "auto_order", lambda device: ())
        mp.setattr(resolve, "AUTO_WHISPER_NAMES", ("no-such-whisper-model",))
        asr = resolve.resolve_asr(config.asr, "cpu")
    assert asr.kind == "pocketsphinx", asr
    return AppState.create(config, random_engine, asr=asr)


def _voice_server(state) -> LoopbackServer:
    from diffvoice.voice.server import create_app

    return LoopbackServer(create_app(state))


def test_page_names_the_agent_and_offers_three_questions(playwright_driver, voice_state,
                                                        tmp_path):
    """GET /agent gives the business and example questions of the model's fact sheet; the page
    shows them before any call. A model without a fact sheet shows none."""
    import dataclasses
    import shutil

    from diffvoice.engine import DEFAULT_MODEL_DIR

    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(DEFAULT_MODEL_DIR / "facts.yaml", model / "facts.yaml")
    state = dataclasses.replace(voice_state, config=voice_state.config.replace(model=str(model)))
    browser = _launch(playwright_driver, chromium_args())
    try:
        with _voice_server(state) as server:
            page = browser.new_page()
            watch = PageWatch(page)
            page.goto(server.url + "/")
            page.wait_for_selector("#agent-card:not([hidden])", timeout=_ms(30))
            assert "Bluebird Dental" in page.locator("#agent-name").inner_text()
            examples = page.locator("#agent-examples li").all_inner_texts()
            assert len(examples) == 3 and "When are you open on Saturday?" in examples[0]
            assert watch.errors == []
        with _voice_server(voice_state) as server:  # random-sdar: no fact sheet
            page = browser.new_page()
            page.goto(server.url + "/")
            page.wait_for_function("document.readyState === 'complete'", timeout=_ms(30))
            page.wait_for_timeout(500)
            assert page.locator("#agent-card").is_hidden()
    finally:
        browser.close()


def test_denied_microphone_is_explained(playwright_driver, voice_state):
    """The user refuses the mic: the page says how to allow it and closes its session."""
    # no --use-fake-ui-for-media-stream here: that flag would accept the prompt
    args = [a for a in chromium_args() if a != "--use-fake-ui-for-media-stream"]
    browser = _launch(playwright_driver, args)
    try:
        with _voice_server(voice_state) as server:
            context = browser.new_context()
            page = context.new_page()
            watch = PageWatch(page)
            target = context.new_cdp_session(page).send("Target.getTargetInfo")["targetInfo"]
            browser.new_browser_cdp_session().send(
                "Browser.setPermission",
                {
                    "permission": {"name": "microphone"},
                    "setting": "denied",
                    "origin": server.url,
                    "browserContextId": target["browserContextId"],
                },
            )
            page.goto(server.url + "/")
            page.click("#mic")
            page.wait_for_function("window.diffvoice.status === 'error'", timeout=_ms(60))
            state = _state(page)
            assert state["notice"]["kind"] == "denied"
            notice = page.locator("#notice").inner_text()
            assert "Microphone access was denied" in notice and "Allow the microphone" in notice
            assert state["audio"]["framesSent"] == 0
            # the page hung up: the server's session ends too
            _wait_until(page, lambda: not voice_state.active_sessions, _ms(30))
            assert watch.errors == []
            _screenshot(page, "mic-denied")
    finally:
        browser.close()


ANSWER_DONE = """() => {
  const s = window.diffvoice, a = s.audio;
  return s.finalTranscripts.length > 0 && s.botTurns.length > 0 && s.latency.length > 0
    && (s.eventCounts["bot.stopped_speaking"] || 0) > 0
    && a.chunksPlayed > 0 && a.chunksPlayed + a.chunksFlushed === a.chunksReceived;
}"""


def test_page_talks_with_the_agent_then_reports_the_dropped_connection(
    playwright_driver, spoken_wav, voice_state
):
    """Click the mic, say one sentence (the fake mic WAV), and check the page against the wire:
    transcript and bot text shown as sent, every bot audio sample played, latency row with
    stop_secs, fallback warning shown. Then stop the server: the page must say so."""
    browser = _launch(playwright_driver, chromium_args(spoken_wav))
    server = _voice_server(voice_state)
    try:
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        watch = PageWatch(page)
        page.goto(f"{server.url}/?stop_secs={STOP_SECS}")
        mic = page.locator("#mic")
        assert mic.get_attribute("aria-pressed") == "false"
        mic.click()
        page.wait_for_function("window.diffvoice.status === 'listening'", timeout=_ms(60))
        assert mic.get_attribute("aria-pressed") == "true"
        page.wait_for_function(ANSWER_DONE, timeout=_ms(120))
        state = _state(page)
        _screenshot(page, "conversation")

        started = watch.of_type("session.started")[0]
        assert state["session"]["session_id"] == started["session_id"]
        assert started["stop_secs"] == STOP_SECS  # the page's session.start was honoured
        # session panel and the pocketsphinx fallback warning, as the server announced them
        assert page.locator("#info-model").inner_text() == started["model"]
        assert page.locator("#info-asr").inner_text() == started["asr"]
        assert page.locator("#info-stop").inner_text() == f"{STOP_SECS:.2f} s"
        assert any("pocketsphinx" in w for w in started["warnings"]), started["warnings"]
        assert page.locator("#warnings li").all_inner_texts() == started["warnings"]

        # what the caller said: the final transcripts sent, shown as the user's turns
        transcripts = watch.of_type("transcript")
        finals = [e["text"] for e in transcripts if e["final"] and e["text"].strip()]
        assert finals, "the server sent no final transcript"
        assert page.locator("#log .turn.user:not(.interim)").all_text_contents() == finals
        # what the bot said: the concatenated bot.text deltas, shown as one answer
        bot_text = "".join(e["text"] for e in watch.of_type("bot.text"))
        assert bot_text.strip(), "the server sent no bot text"
        assert page.locator("#log .turn.bot").all_text_contents() == [bot_text]

        # what the bot said out loud: every sample sent was played to the end, none dropped
        audio = state["audio"]
        assert watch.audio_bytes > 0
        assert audio["chunksFlushed"] == 0 and audio["flushes"] == 0
        assert audio["samplesPlayed"] == watch.audio_bytes // 2
        assert audio["samplesPlayed"] / started["output_sample_rate"] > 0.2  # seconds
        assert audio["peakPlayed"] > 0.01  # not silence
        # the mic really streamed: at least the spoken part, in 20 ms frames
        assert audio["framesSent"] >= 100 and audio["framesDropped"] == 0

        # latency HUD: one row per latency event, stop_secs beside the figures
        latency = watch.of_type("latency")
        rows = page.locator("#hud-body tr")
        assert rows.count() == len(latency) >= 1
        first_row = rows.nth(0).locator("th, td").all_inner_texts()
        record = latency[0]
        assert first_row[1] == f"{record['stop_secs']:.2f} s" == f"{STOP_SECS:.2f} s"
        # the page rounds as JavaScript's Math.round does (half up: 524.5 -> 525), not as
        # Python's round (half to even: 524)
        assert first_row[6] == f"{math.floor(record['server_ms'] + 0.5)} ms"
        # the browser heard the answer after the server sent it (same clock on loopback)
        browser_ms = state["latency"][0]["browser_ms"]
        assert browser_ms is not None and browser_ms >= record["server_ms"] - 5
        assert watch.errors == []

        # hang up with the button: the server's session ends; click again: a new session
        mic.click()
        page.wait_for_function("window.diffvoice.status === 'stopped'", timeout=_ms(10))
        assert mic.get_attribute("aria-pressed") == "false"
        _wait_until(page, lambda: not voice_state.active_sessions, _ms(30))
        mic.click()
        page.wait_for_function("window.diffvoice.status === 'listening'", timeout=_ms(60))
        assert len(watch.of_type("session.started")) == 2

        # the server goes away mid-session: the page must say the connection dropped
        server.stop()
        page.wait_for_function("window.diffvoice.status === 'error'", timeout=_ms(30))
        state = _state(page)
        assert state["notice"]["kind"] == "dropped", state["notice"]
        assert "server" in page.locator("#notice").inner_text()
        assert page.locator("#mic-label").inner_text() == "Try again"
        _screenshot(page, "dropped")
    finally:
        browser.close()
        if server.thread.is_alive():
            server.stop()
