"""The storm's answer audit (latency_bench.reliability.storm._audit) on hand-made event streams:
an answer is a double only when no user turn ended since the previous answer began; an answer to
a user turn that had no words (pipecat's empty-turn recovery) is counted apart, not as a double;
bot audio after a flush and before the next final transcript is stale."""

from diffvoice.latency_bench.reliability.storm import _audit, _Session
from diffvoice.voice.transport import protocol


def _latency(turn: int, user_text: str, ends: int, tool_calls: int = 0) -> protocol.Latency:
    return protocol.Latency(turn=turn, session_id="s", stop_secs=0.2, user_text=user_text,
                            bot_text="ok", user_turn_ends=ends, tool_calls=tool_calls)


def _session(*events) -> _Session:
    s = _Session()
    s.session_id = "s"
    s.events = [(float(i), e) for i, e in enumerate(events)]
    return s


def test_one_answer_per_user_turn_passes_including_tool_turns_and_wordless_turns():
    final = protocol.Transcript(text="book a cleaning", final=True)
    s = _session(final, _latency(1, "book a cleaning", 1, tool_calls=1), "audio",
                 protocol.PlaybackFlush(),
                 # the barge-in's speech was not recognised: no transcript, the turn still ended
                 _latency(2, "", 1), "audio")
    stale, dup, doubles, wordless, examples = _audit(s)
    assert (dup, doubles, wordless) == (0, 0, 1)
    assert stale == 1  # the audio after the flush, with no final transcript since
    assert examples[0]["turn"] == 2 and not examples[0]["double"]


def test_an_answer_without_a_new_user_turn_is_a_double():
    final = protocol.Transcript(text="are you open on sunday", final=True)
    s = _session(final, _latency(1, "are you open on sunday", 1), "audio",
                 _latency(2, "", 0), "audio", _latency(2, "", 0))
    stale, dup, doubles, wordless, examples = _audit(s)
    assert (stale, dup, doubles, wordless) == (0, 1, 2, 0)
    assert [x["double"] for x in examples] == [True, True]
