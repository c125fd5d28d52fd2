"""Aten operators per decoder layer per pass, Qwen2.5-1.5B layout, on the PyTorch path (what a
CPU runs) and on the Triton path (what a GPU runs; here under Triton's CPU interpreter, a
kernel launch counted as one operator): `python count.py OUT.json`, run by run.sh for the
checkout before and after the fused decode path. Counts, not timings: the machine's load does
not change them. Batch 1, the tiny fixture's tokenizer (its ids lie inside the preset's
vocabulary), 2 passes a 32-token block, 32 tokens."""

import json
import sys
import tempfile

from diffvoice.engine import SamplingParams
from diffvoice.engine.loader import load_checkpoint
from diffvoice.engine.testing import make_random_checkpoint
from diffvoice.latency_bench.engine_host import aten_ops_per_layer_pass
from diffvoice.latency_bench.engine_workload import PRESETS

loaded = load_checkpoint(make_random_checkpoint(tempfile.mkdtemp(), family="fast_dllm_v2"))
mc = loaded.config
params = SamplingParams(max_new_tokens=32, steps_per_block=2, ignore_eos=True)
out = {kernels: aten_ops_per_layer_pass(PRESETS["qwen2.5-1.5b"], loaded.tokenizer,
                                        mc.mask_token_id, mc.eos_token_ids[0], params,
                                        kernels=kernels)
       for kernels in ("torch", "triton")}
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1)
print(json.dumps(out))
