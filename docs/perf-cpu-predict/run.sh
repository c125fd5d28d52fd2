#!/usr/bin/env bash
# Issue 40 item 4, prediction only over the slots a pass may commit (docs/perf.md, "Prediction
# over the committable slots"): `bash docs/perf-cpu-predict/run.sh` from the checkout root, with
# the venv of `make setup-dev`. The same engine with EngineConfig.predict_masked on and off
# (`diffvoice bench engine --predict-masked`), run one after the other, the order swapped in the
# second round. Writes the bench JSON beside this file.
set -eu
OUT=$(dirname "$0")
PY=${PYTHON:-.venv/bin/python}
FX=$(mktemp -d)
for family in sdar fast_dllm_v2; do  # the tests' tiny fixtures (engine.testing)
    "$PY" -c "from diffvoice.engine.testing import make_random_checkpoint as m; \
m('$FX/$family', family='$family', seed=1, init_std=0.5)"
done
BENCH=("$PY" -m diffvoice.latency_bench.engine_bench --device cpu --aten-ops-preset none)
for round in 1 2; do
    if [ $round = 1 ]; then ORDER="on off"; else ORDER="off on"; fi
    for mode in $ORDER; do
        # the shipped receptionist as served (fast, low_confidence, 4 passes a block, EOS)
        "${BENCH[@]}" --model models/receptionist-tiny --decoding fast --policy low_confidence \
            --steps-per-block 4 --stop-at-eos --answer-tokens 48 \
            --prompts-file docs/latency/receptionist-questions.txt --batch 1,16 \
            --host-batches 1,16 --predict-masked $mode --out "$OUT/receptionist-$mode-$round.json"
        # the bench's 10M random model (vocabulary 16,384: the head is ~40% of a pass's work)
        "${BENCH[@]}" --preset tiny-10m --decoding fast --policy low_confidence \
            --steps-per-block 4 --prompts 8 --answer-tokens 32 --batch 1,16 --host-batches "" \
            --predict-masked $mode --out "$OUT/tiny10m-$mode-$round.json"
    done
done
for family in sdar fast_dllm_v2; do
    for policy in fixed threshold; do
        if [ $policy = fixed ]; then P="--policy low_confidence --steps-per-block 2"
        else P="--policy threshold --threshold 0.9"; fi
        for mode in on off; do
            # shellcheck disable=SC2086
            "${BENCH[@]}" --model "$FX/$family" --decoding fast $P --prompts 8 \
                --answer-tokens 32 --batch 1,16 --host-batches 1,16 --predict-masked $mode \
                --out "$OUT/fixture-$family-$policy-$mode.json"
        done
    done
done
