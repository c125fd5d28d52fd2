#!/usr/bin/env bash
# One pass of every GPU check, for a lent CUDA machine (written for the H200 device: its image has
# python3 with a CUDA torch, Triton, pytest, matplotlib, transformers; nothing can be installed).
#
#   bash kernels/h200_run.sh OUTDIR            # on the GPU machine, from the checkout root
#   DRY_RUN=1 bash kernels/h200_run.sh OUTDIR  # CPU rehearsal: tiny shapes, Triton interpreter
#
# Steps, each under its own time limit, each going on when an earlier one failed:
#   env      nvidia-smi, python/torch/triton versions
#   pytest   tests/kernels (every kernel test on CUDA tensors), tests/engine/test_cuda_graphs.py,
#            tests/engine/test_triton_engine.py tests/engine/test_warmup_graphs.py, and
#            test_golden.py's golden tokens on the GPU's Triton path
#   kernels  python -m diffvoice.kernels.bench (Triton vs reference at real sizes, GB/s vs copy,
#            then `diffvoice bench engine --preset qwen2.5-1.5b --dtype bfloat16 --batch 1,32
#            --compare-graphs`)
#   fast     the same 1.5B shape under the engine's own decoding (--decoding fast: 16-token blocks
#            in 2 low-confidence passes, as the goals assume; random weights never pass the
#            families' confidence thresholds, so their own rules commit one token a pass)
#   passes   the `fast` run pass by pass (--block-step-passes 1): what block steps change on the
#            GPU, same settings, same machine
#   nolap    the `fast` run without overlap (--overlap off; on CUDA the engine queues a block step
#            before reading the one before it): what overlap changes, same settings
#   whole    the `fast` run predicting the whole window (--predict-masked off): what predicting
#            only the committable slots changes in its eager mode (graph passes always predict
#            the whole window), same settings
#   recept   `diffvoice bench engine --model models/receptionist-tiny` on CUDA, graphs vs eager
#   profile  python -m diffvoice.latency_bench.engine_profile: host against device time per pass
# ONLY="fast recept" runs just those steps.
# Everything lands in OUTDIR/results.tgz (re-packed after every step, so a run cut off at its
# limit still brings back what finished) and OUTDIR/log.txt.
set -u
OUT_DIR=${1:?usage: kernels/h200_run.sh OUTDIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RES=$(mktemp -d)/h200
mkdir -p "$RES" "$OUT_DIR"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
# `diffvoice` is the checkout root (pyproject maps it so): a link makes it importable unbuilt.
PKG=$(mktemp -d)
ln -s "$ROOT" "$PKG/diffvoice"
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT" || exit 1
# Packages the image lacks travel as wheels in .whl/ (websockets: `diffvoice bench`'s parser).
if compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
ENGINE_BENCH=("$PY" -m diffvoice.latency_bench.engine_bench)  # = diffvoice bench engine

pack() { tar -czf "$OUT_DIR/results.tgz.part" -C "$(dirname "$RES")" h200 \
         && mv "$OUT_DIR/results.tgz.part" "$OUT_DIR/results.tgz"; }
step() {  # step NAME LIMIT_S CMD...: run, record status and seconds, pack
    local name=$1 limit=$2; shift 2
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
    local t0=$SECONDS
    echo "=== $name (limit ${limit}s) $(date -u +%H:%M:%S)"
    timeout -k 10 "$limit" "$@" > "$RES/$name.log" 2>&1
    local rc=$?
    tail -n 40 "$RES/$name.log"
    echo "=== $name rc=$rc in $((SECONDS - t0))s"
    echo "$name rc=$rc seconds=$((SECONDS - t0))" >> "$RES/steps.txt"
    pack
}

if [ -n "${DRY_RUN:-}" ]; then
    export TRITON_INTERPRET=1
    BENCH_ARGS=(--dry-run)
    RECEPT=(--device cpu --dtype float32 --batch 1,2 --prompts 4)
    FAST=(--preset tiny-10m --device cpu --dtype float32 --batch 1,2 --prompts 4 --block-size 8)
    PROFILE=(--preset tiny-10m --device cpu --dtype float32 --batch 1,2 --prompts 4 --block-size 8)
else
    BENCH_ARGS=(--engine-timeout-s 170)
    RECEPT=(--device cuda --dtype float32 --batch 1,8,32 --compare-graphs)
    FAST=(--preset qwen2.5-1.5b --device cuda --dtype bfloat16 --batch 1,32 --compare-graphs
          --context 1024 --block-size 16)
    PROFILE=(--batch 1,32)
fi

step env 30 bash -c "date -u; nvidia-smi || true; $PY -c 'import sys, torch, triton; \
print(sys.version); print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \
torch.cuda.is_available() and torch.cuda.get_device_name()); print(\"triton\", triton.__version__)'"
step pytest 180 "$PY" -m pytest -q -p no:cacheprovider -o addopts= -o asyncio_mode=auto \
    --junitxml="$RES/pytest.xml" tests/kernels tests/engine/test_cuda_graphs.py \
    tests/engine/test_triton_engine.py tests/engine/test_warmup_graphs.py \
    tests/engine/test_golden.py::test_triton_path_reproduces_golden_tokens
step kernels 240 "$PY" -m diffvoice.kernels.bench --out "$RES/perf" "${BENCH_ARGS[@]}" \
    ${KERNELS_EXTRA:-}  # e.g. KERNELS_EXTRA=--skip-engine
step fast 180 "${ENGINE_BENCH[@]}" "${FAST[@]}" --decoding fast --policy low_confidence \
    --steps-per-block 2 --answer-tokens 32 --out "$RES/perf/engine-fast.json"
step passes 100 "${ENGINE_BENCH[@]}" "${FAST[@]}" --decoding fast --policy low_confidence \
    --steps-per-block 2 --answer-tokens 32 --block-step-passes 1 --aten-ops-preset none \
    --out "$RES/perf/engine-fast-pass-by-pass.json"
step nolap 100 "${ENGINE_BENCH[@]}" "${FAST[@]}" --decoding fast --policy low_confidence \
    --steps-per-block 2 --answer-tokens 32 --overlap off --aten-ops-preset none \
    --out "$RES/perf/engine-fast-no-overlap.json"
step whole 100 "${ENGINE_BENCH[@]}" "${FAST[@]}" --decoding fast --policy low_confidence \
    --steps-per-block 2 --answer-tokens 32 --predict-masked off --aten-ops-preset none \
    --out "$RES/perf/engine-fast-whole-window.json"
step recept 60 "${ENGINE_BENCH[@]}" --model models/receptionist-tiny \
    --policy threshold --stop-at-eos --answer-tokens 48 \
    --prompts-file docs/latency/receptionist-questions.txt "${RECEPT[@]}" \
    --host-batches "" --aten-ops-preset none \
    --out "$RES/perf/engine-receptionist.json"
step profile 90 "$PY" -m diffvoice.latency_bench.engine_profile "${PROFILE[@]}" \
    --out "$RES/perf/profile"
cat "$RES/steps.txt"
