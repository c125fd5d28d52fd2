#!/usr/bin/env bash
# Issue 40 item 2 on this CPU (docs/perf.md, "Overlap"): `bash docs/perf-cpu-overlap/run.sh` from
# the checkout root, with the venv of `make setup-dev`. The same engine with overlap off (the CPU
# default) and on, one after the other per case; the bench JSON lands beside this file.
set -eu
OUT=$(dirname "$0")
PY=${PYTHON:-.venv/bin/python}
FX=$(mktemp -d)
for family in sdar fast_dllm_v2; do  # the tests' tiny fixtures (engine.testing)
    "$PY" -c "from diffvoice.engine.testing import make_random_checkpoint as m; \
m('$FX/$family', family='$family', seed=1, init_std=0.5)"
done
BENCH=("$PY" -m diffvoice.latency_bench.engine_bench --device cpu --aten-ops-preset none)
for family in sdar fast_dllm_v2; do  # a fixed schedule: 2 low_confidence passes a block
    for overlap in off on; do
        "${BENCH[@]}" --model "$FX/$family" --decoding fast --policy low_confidence \
            --steps-per-block 2 --prompts 8 --answer-tokens 32 --batch 1,16 \
            --host-batches 1,16 --overlap $overlap --out "$OUT/fixture-$family-$overlap.json"
    done
done
for round in 1 2; do  # the shipped receptionist as served (answers end at an EOS)
    for overlap in off on; do
        "${BENCH[@]}" --model models/receptionist-tiny --decoding fast --policy low_confidence \
            --steps-per-block 4 --stop-at-eos --answer-tokens 48 \
            --prompts-file docs/latency/receptionist-questions.txt --batch 1,16 \
            --host-batches 1,16 --overlap $overlap --out "$OUT/receptionist-$overlap-$round.json"
    done
done
rm -rf "$FX"
rm -f "$OUT"/*.png "$OUT"/*.html "$OUT"/*.md  # the JSON is the record (docs/perf.md)
