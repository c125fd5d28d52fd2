"""End to end: a spoken booking through the browser protocol against the real server on loopback
(espeak-ng audio in at a slow, clear 125 words a minute, Whisper tiny.en ASR (the serve default),
the shipped model at models/receptionist-tiny with its tools decoded by the engine's constrained
mode and the clarify guard on, as `diffvoice serve` runs it, espeak TTS out). Caller A books a
cleaning on Friday at 10 am (answering the bot's slot-filling questions): the right row lands
in the SQLite book and the bot confirms aloud. Caller B asks for the same slot: no second
booking; the book refuses it and offers other times (whether the bot then SAYS the right times is
a known failure with the v2 model, below). Needs the tool-trained receptionist model (a
`<tool_call>` token in its tokenizer): with an older model the test is skipped with that reason
(no mock model stands in)."""

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
RATE_WPM = 125  # a slow, clear caller: Whisper tiny.en hears day, time and name exactly


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
    # DIFFVOICE_TEST_ASR_PROMPT=auto runs the same calls with Whisper's domain prompt on
    prompt = {"asr_prompt": os.environ["DIFFVOICE_TEST_ASR_PROMPT"]} \
        if os.environ.get("DIFFVOICE_TEST_ASR_PROMPT") else {}
    config = ServeConfig(port=0, model=str(MODEL), asr="whisper-tiny.en", device="cpu",
                         stop_secs=0.5, receptionist_tools="on", appointments_db=str(db),
                         **prompt)
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


# Whisper tiny.en hears espeak's "can i book ..." as "can i work ...", a lone "at 10 am" as
# "I'll turn it in.", "10 am please" as "Can I am please?" and "at 10 am on friday" as "But turn
# a mon 3b" (runner pass at 125 wpm, 2026-12-03); these it hears right
REQUEST = "i need a cleaning on friday at 10 am"
FOLLOW_UPS = {"name": "my name is {name}", "time": "at ten in the morning please",
              "day": "friday at ten in the morning"}


async def _dialogue(live, speech, db, name: str, max_turns: int = 8) -> list[str]:
    """Ask for the slot, then answer the bot's slot-filling questions (name, day, time); asked
    something else (the clarifying question, or an answer that asks nothing), say the request
    again, as a caller would. On a loaded machine the turn may end at the pause after "friday"
    (the bot then asks for the time), which this also covers. Up to 8 turns: a request split
    at that pause and a misheard answer took 5 turns and more in runs of 2026-12-03, the
    booking then one turn from done."""
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
            line = FOLLOW_UPS[asked[0]].format(name=name) if asked else REQUEST
    return turns


@pytest.fixture(scope="module")
def two_callers(server, speech):
    """Caller A books Friday 10 am; caller B then asks for the same slot. -> (a, b, results):
    each caller's turns and every tool result the book returned, in order."""
    live, db = server
    results = []
    real_call = live.state.receptionist.call

    def spy(name, arguments, *, caller=None, **kwargs):
        result = real_call(name, arguments, caller=caller, **kwargs)
        results.append((name, arguments, result))
        return result

    live.state.receptionist.call = spy

    async def both():
        a = await _dialogue(live, speech, db, "sam jones")
        b = await _dialogue(live, speech, db, "chloe wilson")
        return a, b

    try:
        a, b = asyncio.run(both())
    finally:
        live.state.receptionist.call = real_call
    return a, b, results


def _bot(turns: list[str]) -> str:
    return " ".join(t.rsplit("-> bot", 1)[-1] for t in turns).lower()


def _refusals(results: list[tuple]) -> list[list[str]]:
    """The times the book offered B instead of the taken Friday 10:00, in order: a refused
    `book_appointment`'s alternatives, or a `check_availability` of Friday 10:00 that no longer
    lists 10:00 (the model may check first when B has not said a name yet: name cues keep
    `book_appointment` out of the request until one is given; which comes first depends on
    what Whisper heard of B's streamed request, so both are B being refused)."""
    out = []
    for name, args, res in results:
        if name == "book_appointment" and res.get("booked") is False:
            out.append(res["alternatives"])
        elif (name == "check_availability" and (args.get("day"), args.get("time")) ==
              ("friday", "10:00") and res.get("available") and "10:00" not in res["available"]):
            out.append(res["available"])
    return out


# Was xfail (intermittent: the name slot copied "they"; Whisper heard "10 am please" as "Can I am
# please?"). Since 2026-12-03 a name is copied only where one was given (context.py name cues)
# and the follow-ups are phrasings Whisper tiny.en hears right. Until 2026-12-03 (evening) B's
# refusal had to come from `book_appointment`; 1 of 3 runs with the ASR defaults failed because
# the model first checked availability (B had not said a name), which is B refused as well.
def test_spoken_booking_leaves_the_row_and_the_same_slot_is_refused(server, two_callers):
    """What the callers get done: A's booking is in SQLite and confirmed aloud; B's request for
    the same slot books nothing: the book refuses it (a refused booking or an availability check
    without 10:00) and hands the model other times (what B then hears is checked below)."""
    live, db = server
    a, b, results = two_callers
    rows = _rows(db)
    assert [(s, d, m, n) for s, d, m, n in rows] == [("cleanings", "friday", 600, "sam jones")], \
        (a, b, rows)
    assert "booked" in _bot(a[-1:]), a  # a spoken confirmation (its day/time: see below)
    bookings = [(args, res) for name, args, res in results if name == "book_appointment"]
    assert bookings[0] == ({"service": "cleanings", "day": "friday", "time": "10:00",
                            "name": "sam jones"}, {"booked": True}), results
    # B asked for the same slot: refused by the book, alternatives offered (B may ask twice:
    # after a clarifying question the caller repeats the request)
    first_b = results.index(("book_appointment", bookings[0][0], bookings[0][1])) + 1
    assert _refusals(results[first_b:]), (b, results)
    for args, res in bookings[1:]:
        assert (args["day"], args["time"]) == ("friday", "10:00"), results
        assert res["booked"] is False and res["alternatives"], results
    assert _bot(b[-1:]).strip(), b  # B is answered aloud
    free = live.state.receptionist.book.free_starts("cleanings", "friday")
    assert "10:00" not in free


# The spoken sentences are free text, and the v2/v3 models misstated times and days in them
# ("You're booked for a cleaning on Friday at 9 pm." for Friday 10:00; blended offers). Since
# 2026-12-03 the clarify guard grounds them (agent/grounding.py): after a tool result a
# reply stating a time or day the call and result do not hold becomes the trained sentence.
def test_spoken_confirmation_and_offers_state_the_right_times(two_callers):
    from diffvoice.agent.tool_schemas import spoken_time

    a, b, results = two_callers
    assert "friday at 10 am" in _bot(a[-1:]), a  # the day and the time the book holds
    offered = [spoken_time(t) for t in _refusals(results)[0]]
    assert offered and all(t in _bot(b) for t in offered), (b, offered)
