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
from starlette.staticfiles import StaticFiles

_missing = missing_tools()
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(bool(_missing), reason=f"browser test needs: {', '.join(_missing)}"),
]

SPOKEN_TEXT = "Hello! What time do you open tomorrow morning?"
STOP_SECS = 0.5
UNIT_MS = 1000 * timeout_scale()  # every wait below is a multiple of this


def _ms(units: float) -> float:
    return units * UNIT_MS


@pytest.fixture(scope="module")
def spoken_wav(tmp_path_factory):
    return make_spoken_wav(tmp_path_factory.mktemp("mic") / "caller.wav", SPOKEN_TEXT)


@pytest.fixture(scope="module")
def playwright_driver():
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


def _static_web_app() -> Starlette:
    """Serves web/ only: no /ws, i.e. a page whose voice server is not there."""
    app = Starlette()
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
  const before = { ...player.stats, queued: player.queuedSecs() };
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
    # 400 ms into a 2 s queue: some chunks played, most still queued
    assert 3 <= before["chunksPlayed"] <= 12, before
    assert before["queued"] > 1.0, before
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
