#!/usr/bin/env bash
# Issue 40's CPU measurements (docs/perf.md, "Block steps"): `bash docs/perf-cpu-block-steps/run.sh`
# from the checkout root, with the venv of `make setup-dev`. Writes the bench JSON beside this file.
# Three configurations of the same engine, one after another per case:
#   today    pass by pass, torch's default threads on the worker (--block-step-passes 1
#            --worker-threads 0): what the engine did before issue 40
#   threads  pass by pass, one torch thread on the worker
#   blocks   the defaults: block steps and one torch thread on the worker
set -eu
OUT=$(dirname "$0")
PY=${PYTHON:-.venv/bin/python}
FX=$(mktemp -d)
for family in sdar fast_dllm_v2; do  # the tests' tiny fixtures (engine.testing)
    "$PY" -c "from diffvoice.engine.testing import make_random_checkpoint as m; \
m('$FX/$family', family='$family', seed=1, init_std=0.5)"
done
declare -A CONFIG=([today]="--block-step-passes 1 --worker-threads 0"
                   [threads]="--block-step-passes 1" [blocks]="")
BENCH=("$PY" -m diffvoice.latency_bench.engine_bench --device cpu --aten-ops-preset none)
for family in sdar fast_dllm_v2; do
    for policy in fixed threshold; do
        if [ $policy = fixed ]; then P="--policy low_confidence --steps-per-block 2"
        else P="--policy threshold --threshold 0.9"; fi
        for config in today threads blocks; do
            # shellcheck disable=SC2086
            "${BENCH[@]}" --model "$FX/$family" --decoding fast $P --prompts 8 \
                --answer-tokens 32 --batch 1,16 --host-batches 1,16 ${CONFIG[$config]} \
                --out "$OUT/fixture-$family-$policy-$config.json"
        done
    done
done
for round in 1 2; do  # the shipped receptionist as served (fast, low_confidence, 4 passes a block, 48 tokens, EOS)
    for config in today threads blocks; do
        # shellcheck disable=SC2086
        "${BENCH[@]}" --model models/receptionist-tiny --decoding fast --policy low_confidence \
            --steps-per-block 4 --stop-at-eos --answer-tokens 48 \
            --prompts-file docs/latency/receptionist-questions.txt --batch 1,16 \
            --host-batches 1,16 ${CONFIG[$config]} \
            --out "$OUT/receptionist-$config-$round.json"
    done
done
"$PY" -m diffvoice.latency_bench.engine_bench --device cpu --prompts 2 --answer-tokens 16 \
    --batch 1 --host-batches "" --aten-ops-preset qwen2.5-1.5b --out "$OUT/aten-ops.json"
rm -rf "$FX"
rm -f "$OUT"/*.png "$OUT"/*.html "$OUT"/*.md  # the JSON is the record (docs/perf.md)
