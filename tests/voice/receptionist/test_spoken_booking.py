"""End to end: a spoken booking through the browser protocol against the real server on loopback
(espeak-ng audio in, pocketsphinx ASR, the shipped model at models/receptionist-tiny, espeak TTS
out). Caller A books a cleaning on Friday at 10 am (answering the bot's slot-filling questions):
the right row lands in the SQLite book and the bot confirms aloud. Caller B asks for the same
slot: no second booking, and B is offered another time. Needs the tool-trained receptionist
model (a `<tool_call>` token in its tokenizer): with an older model the test is skipped with
that reason (no mock model stands in)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from pathlib import Path

import pytest
from voice_client import connect, send_pcm
from voice_fixtures import LiveServer, scaled

from diffvoice.voice.transport import protocol

pytestmark = [pytest.mark.slow]

# the shipped model; DIFFVOICE_TEST_RECEPTIONIST points the test at another checkpoint dir
MODEL = Path(os.environ.get("DIFFVOICE_TEST_RECEPTIONIST") or
             Path(__file__).resolve().parents[3] / "models" / "receptionist-tiny")
QUIET_S = 2.5
RATE_WPM = 125  # slower espeak: pocketsphinx hears the day and the time more reliably


def _model_trained_for_tools() -> bool:
    from diffvoice.engine.tokenizer import ChatTokenizer

    if not (MODEL / "config.json").is_file() or not (MODEL / "facts.yaml").is_file():
        return False
    return len(ChatTokenizer.from_dir(MODEL).encode("<tool_call>")) == 1


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not _model_trained_for_tools():
        pytest.skip(f"{MODEL} is not the tool-trained receptionist (no single <tool_call> "
                    "token in its tokenizer)")
    from diffvoice.engine import Engine, EngineConfig
    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.state import AppState

    db = tmp_path_factory.mktemp("book") / "appointments.sqlite3"
    config = ServeConfig(port=0, model=str(MODEL), asr="pocketsphinx", device="cpu",
                         stop_secs=0.5, receptionist_tools="on", appointments_db=str(db))
    engine = Engine.from_pretrained(MODEL, EngineConfig(device="cpu", max_running=4))
    engine.warmup()
    state = AppState.create(config, engine)
    assert state.receptionist is not None
    with LiveServer(state) as live:
        yield live, db
    engine.close()


def _bot_texts(call, since: int) -> str:
    return " ".join(e.text for e in call.events[since:] if isinstance(e, protocol.BotText))


async def _say(ws, call, speech, text: str) -> str:
    """Speak one utterance; wait until the bot spoke and then stayed quiet; -> its words."""
    start = len(call.events)
    stopped_before = len(call.of(protocol.BotStoppedSpeaking))
    await send_pcm(ws, speech(text, rate_wpm=RATE_WPM), speed=1.0)  # real time, as a caller
    deadline = time.monotonic() + scaled(120)
    while time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        spoke = len(call.of(protocol.BotStoppedSpeaking)) > stopped_before
        quiet = call.event_times and time.time() - call.event_times[-1] > QUIET_S
        if spoke and quiet:
            break
    heard = [e.text for e in call.events[start:] if isinstance(e, protocol.Transcript) and e.final]
    return f"heard {heard!r} -> bot {_bot_texts(call, start)!r}"


def _rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT service, day, start_min, name FROM visits ORDER BY id").fetchall()


# phrasings inside the pocketsphinx domain LM's sentences (built from the receptionist's
# training questions), so the recognizer has a fair chance on espeak speech
REQUEST = "can i book a cleaning on friday at 10 am"
FOLLOW_UPS = {"name": "{name}", "time": "at 10 am", "day": "on friday at 10 am"}


async def _dialogue(live, speech, db, name: str, max_turns: int = 4) -> list[str]:
    """Ask for the slot, then answer the bot's slot-filling questions (name, day, time)."""
    turns = []
    before = len(_rows(db))
    async with connect(live.ws_url, config={"stop_secs": 0.5}) as (ws, call, _done):
        for _ in range(int(scaled(100))):
            if call.started is not None:
                break
            await asyncio.sleep(0.05)
        line = REQUEST
        for _ in range(max_turns):
            turns.append(await _say(ws, call, speech, line))
            reply = turns[-1].rsplit("-> bot", 1)[-1].lower()
            if len(_rows(db)) > before or "booked" in reply or "instead" in reply:
                break
            asked = [k for k in FOLLOW_UPS if k in reply]
            if not asked:
                break
            line = FOLLOW_UPS[asked[0]].format(name=name)
    return turns


# Known failure, kept running so it shows when fixed (issue 15 is open for it): with the shipped
# v2 model, pocketsphinx hears "can i book a cleaning on friday at 10 am" as e.g. "are you book
# a real do i knocked do you", and the model misfills day/time (booking accuracy 9.7% in its
# model card). Not strict: a lucky pass must not break the build.
@pytest.mark.xfail(reason="spoken booking with the shipped model does not book yet (issue 15)")
async def test_spoken_booking_then_the_same_slot_is_offered_another_time(server, speech):
    from diffvoice.engine.train.tool_schemas import spoken_time

    live, db = server
    a = await _dialogue(live, speech, db, "sam jones")
    rows = _rows(db)
    assert [(s, d, m) for s, d, m, _ in rows] == [("cleanings", "friday", 600)], (a, rows)
    assert rows[0][3].strip(), rows
    confirmation = a[-1].rsplit("-> bot", 1)[-1].lower()
    assert "friday" in confirmation and "10 am" in confirmation, a

    b = await _dialogue(live, speech, db, "chloe wilson")
    assert len(_rows(db)) == 1, (b, _rows(db))  # the slot stayed A's
    free = live.state.receptionist.book.free_starts("cleanings", "friday")
    offered = [spoken_time(t) for t in free]
    spoken = " ".join(t.rsplit("-> bot", 1)[-1] for t in b).lower()
    assert any(t in spoken for t in offered), (b, offered[:4])
