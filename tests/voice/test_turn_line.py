"""The one INFO line the server logs per turn (voice.pipeline.turn_line)."""

from dataclasses import asdict

from diffvoice.voice.pipeline import turn_line
from diffvoice.voice.transport import protocol


def test_a_turn_is_one_line_with_what_was_heard_said_and_timed():
    record = asdict(protocol.Latency(
        turn=3, session_id="s-1", stop_secs=0.4, vad_stop_t=1.0, transcript_final_t=1.2,
        llm_first_text_t=1.3, tts_first_audio_t=1.35, first_audio_sent_t=1.36,
        endpointing_ms=401.0, asr_ms=200.0, llm_ttft_ms=100.4, tts_first_audio_ms=50.0,
        server_ms=360.0, interrupted=True, user_text="when do you open\non saturday",
        bot_text="We open at 9 am."))
    line = turn_line(record)
    assert "\n" not in line
    assert line.startswith("turn s-1#3: heard 'when do you open\\non saturday' -> "
                           "said 'We open at 9 am.'")
    assert "server 360 ms (endpointing 401, asr 200, llm 100, tts 50) interrupted" in line
    assert "draft-hit" not in line
    record.update(asr_ms=None, interrupted=False, draft_hit=True)
    assert "asr -," in turn_line(record) and turn_line(record).endswith("draft-hit")
