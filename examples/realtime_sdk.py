"""The official `openai` SDK's Realtime client against diffvoice's /v1/realtime.

Any app written for OpenAI's Realtime API switches to diffvoice by changing one URL:

    diffvoice serve &          # http://127.0.0.1:8000; /v1/realtime is on the same port
    python examples/realtime_sdk.py --text "When are you open on Saturday?" --out answer.wav
    python examples/realtime_sdk.py --wav question.wav --out answer.wav
    python examples/realtime_sdk.py --text "Is it raining in Paris?" --tool

--text sends a user message (`conversation.item.create`) and asks for the answer
(`response.create`). --wav streams a WAV file (16-bit PCM, any rate; stereo mixed down) in real
time as 24 kHz `input_audio_buffer.append`, then a second of silence: the server's VAD
(`server_vad`) ends the turn and the server answers by itself. --tool declares a function the
model must call (`tool_choice: required`); this script "runs" it, sends the result as a
`function_call_output` item, and asks for the spoken outcome: a round trip as with OpenAI's
function calls (the server decodes the arguments through a constrained decoder: they always
match the schema). The answer's transcript is printed and its audio (24 kHz mono) written to
--out. Exits 1 on an `error` event or a timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import time
import wave

import numpy as np

RATE = 24000
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"], "additionalProperties": False}}


def wav_pcm24k(path: str) -> np.ndarray:
    """A 16-bit WAV file as 24 kHz mono int16 samples."""
    import soxr

    with wave.open(path, "rb") as f:
        if f.getsampwidth() != 2:
            raise SystemExit(f"{path}: 16-bit PCM WAV only")
        samples = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
        channels, rate = f.getnchannels(), f.getframerate()
    mono = samples.reshape(-1, channels).mean(axis=1) if channels > 1 else samples
    return soxr.resample(mono.astype(np.float32), rate, RATE).clip(-32768, 32767).astype("<i2")


async def stream(conn, pcm: np.ndarray) -> None:
    """20 ms appends in real time, then a second of silence for the VAD."""
    pcm = np.concatenate([pcm, np.zeros(RATE, dtype="<i2")])
    t0, chunk = time.monotonic(), RATE // 50
    for i, start in enumerate(range(0, len(pcm), chunk)):
        await asyncio.sleep(max(0.0, t0 + i * 0.02 - time.monotonic()))
        await conn.input_audio_buffer.append(
            audio=base64.b64encode(pcm[start:start + chunk].tobytes()).decode())


async def answer(conn, audio: bytearray) -> tuple[str, list]:
    """Read events until response.done: (its transcript or text, its output items)."""
    text = []
    async for event in conn:
        if event.type == "error":
            raise RuntimeError(f"server error {event.error.code}: {event.error.message}")
        if event.type == "conversation.item.input_audio_transcription.completed":
            print(f"caller: {event.transcript}")
        elif event.type in ("response.output_audio_transcript.delta",
                            "response.output_text.delta"):
            text.append(event.delta)
        elif event.type == "response.output_audio.delta":
            audio += base64.b64decode(event.delta)
        elif event.type == "response.done":
            return "".join(text), event.response.output or []
    raise RuntimeError("the server closed the connection")


async def main(args) -> int:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key=args.api_key, websocket_base_url=args.url)
    audio = bytearray()
    async with client.realtime.connect(model=args.model) as conn:
        session: dict = {"type": "realtime", "output_modalities": ["audio"]}
        if args.instructions:
            session["instructions"] = args.instructions
        if args.tool:
            session.update(tools=[WEATHER], tool_choice="required")
        await conn.session.update(session=session)
        if args.wav:
            await stream(conn, wav_pcm24k(args.wav))
        else:
            await conn.conversation.item.create(item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": args.text}]})
            await conn.response.create()
        said, output = await answer(conn, audio)
        for item in output:
            if item.type == "function_call":  # run it here, as OpenAI's function calls are
                print(f"model called {item.name}({item.arguments})")
                result = {"city": json.loads(item.arguments)["city"], "forecast": "sunny, 21 C"}
                await conn.conversation.item.create(item={
                    "type": "function_call_output", "call_id": item.call_id,
                    "output": json.dumps(result)})
                await conn.response.create()
                said, _ = await answer(conn, audio)
        print(f"agent: {said}")
    if args.out:
        with wave.open(args.out, "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(RATE)
            f.writeframes(bytes(audio))
        print(f"wrote {len(audio) / 2 / RATE:.1f} s of audio to {args.out}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8000/v1",
                        help="the server's WebSocket base URL (the SDK adds /realtime)")
    parser.add_argument("--model", default="receptionist-tiny",
                        help="the served model's name (GET /v1/models lists it)")
    parser.add_argument("--api-key", default="none", help="an API key if the server has some")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--text", default="When are you open on Saturday?")
    what.add_argument("--wav", help="a WAV file to speak instead of --text")
    parser.add_argument("--tool", action="store_true", help="a function call round trip")
    parser.add_argument("--instructions", help="the session's instructions")
    parser.add_argument("--out", help="write the answer's audio here (WAV, 24 kHz)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds")
    args = parser.parse_args()
    try:
        sys.exit(asyncio.run(asyncio.wait_for(main(args), args.timeout)))
    except (RuntimeError, TimeoutError, OSError) as e:
        print(f"realtime_sdk: {e or type(e).__name__}", file=sys.stderr)
        sys.exit(1)
