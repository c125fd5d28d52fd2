"""A/B driver: one engine on a random checkpoint, batch 1 and 8 concurrent requests of 96 forced
tokens, min of 15 rounds each; prints JSON. Run with PYTHONPATH=/tmp/ab/base or /tmp/ab/after."""
import asyncio, json, sys, time
from diffvoice.engine import Engine, EngineConfig, SamplingParams
fam, ckpt = sys.argv[1], sys.argv[2]
engine = Engine.from_pretrained(ckpt, EngineConfig(device="cpu", enforce_eager=True))
engine.warmup()
chats = [[{"role": "user", "content": f"question {i}: when are you open on saturday?"}]
         for i in range(8)]
params = SamplingParams(max_new_tokens=96, ignore_eos=True)
async def one(i):
    return [d async for d in engine.generate(chats[i], params)]
async def batch(n):
    await asyncio.gather(*(one(i) for i in range(n)))
out = {"family": fam, "code": sys.path[1] if len(sys.path) > 1 else ""}
import diffvoice.engine.scheduler as s
out["code"] = s.__file__
for n in (1, 8):
    ts = []
    for _ in range(15):
        t = time.perf_counter(); asyncio.run(batch(n)); ts.append(time.perf_counter() - t)
    out[f"b{n}_ms"] = round(min(ts) * 1000, 1)
engine.close()
print(json.dumps(out))
