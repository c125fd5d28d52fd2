"""One Twilio call per slot dialogue whose answer is "yes" or "maria", per espeak voice and
speed, against a running server (the bench's own Twilio caller, latency_bench.twilio_client):

    TWILIO_AUTH_TOKEN=tok diffvoice --log-level DEBUG serve --port 8899 \
        --public-url http://127.0.0.1:8899 > serve.log 2>&1 &
    python docs/latency/vad-gate/twilio_repro.py http://127.0.0.1:8899/telephony/twilio/voice \
        en-gb+m3,en-us 150,175,200

Prints per turn: dialogue/voice, prompt, status, message, ms from the end of speech to the
first audible answer, call sid (grep the server log for it). Output: twilio_repro.txt."""
import asyncio
import sys
from pathlib import Path

from diffvoice.latency_bench.config import BenchConfig
from diffvoice.latency_bench.corpus import SLOT_DIALOGUES, dialogue_prompts
from diffvoice.latency_bench.speakers import espeak_speakers
from diffvoice.latency_bench.twilio_client import run_twilio_session

url = sys.argv[1]
dialogues = [d for d in SLOT_DIALOGUES if d[1] in ("yes", "maria")]
voices = sys.argv[2].split(",")
speeds = [int(s) for s in sys.argv[3].split(",")]
prompts = dialogue_prompts(dialogues, espeak_speakers(voices, speeds),
                           Path("~/.cache/diffvoice/bench-corpus").expanduser())
config = BenchConfig(url=url, protocol="twilio", twilio_auth_token="tok", bot_quiet_s=1.0,
                     pause_s=0.3, turn_timeout_s=15.0)
units = {}
for p in prompts:
    units.setdefault(p.dialogue, []).append(p)

async def main():
    for key, unit in units.items():
        out = []
        info = await run_twilio_session(config, url, 0, unit, 1, out.append)
        for t in out:
            heard = (t.first_audible_t - t.speech_end_t) * 1000 if t.first_audible_t else None
            print(key, t.prompt, t.status, t.message, heard, info.get("call_sid"), flush=True)
asyncio.run(main())
