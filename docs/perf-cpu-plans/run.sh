#!/usr/bin/env bash
# Issue 40 item 3 (docs/perf.md, "Plans keyed by shape"): `bash docs/perf-cpu-plans/run.sh` from
# the checkout root, with the venv of `make setup-dev`. Measures the checkout before shape-keyed
# plans (BASE, checked out into a temporary git worktree) and this one, alternately, in one run:
#   plans_ab.py  the engine core on the tiny fixtures, fresh prompts (see its docstring)
#   bench        `diffvoice bench engine` on the shipped receptionist as served (fast,
#                low_confidence, 4 passes a block, 48 tokens, EOS), batch 1 and 16
# Writes JSON beside this file, or into OUT (an existing directory).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(cd "${OUT:-$HERE}" && pwd)
ROOT=$(pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
BASE=${BASE:-d40200d}
TMP=$(mktemp -d)
git worktree add -q --detach "$TMP/base" "$BASE"
mkdir "$TMP/pkg" && ln -s "$TMP/base" "$TMP/pkg/diffvoice"  # `import diffvoice` -> BASE
trap 'git worktree remove --force "$TMP/base"; rm -rf "$TMP"' EXIT
run() {  # run TREE ARGS...: TREE=base imports BASE, TREE=after this checkout
    local tree=$1; shift
    if [ "$tree" = base ]; then (cd "$TMP" && PYTHONPATH="$TMP/pkg" "$PY" "$@")
    else (cd "$TMP" && "$PY" "$@"); fi
}
for round in 1 2; do
    for family in sdar fast_dllm_v2; do
        for policy in fixed threshold; do
            for batch in 1 16; do
                for tree in base after; do
                    run $tree "$HERE/plans_ab.py" $family $batch $policy \
                        "$OUT/core-$family-$policy-b$batch-$tree-$round.json"
                done
            done
        done
    done
done
for round in 1 2; do
    for tree in base after; do
        run $tree -m diffvoice.latency_bench.engine_bench --device cpu --aten-ops-preset none \
            --model "$ROOT/models/receptionist-tiny" --decoding fast --policy low_confidence \
            --steps-per-block 4 --stop-at-eos --answer-tokens 48 \
            --prompts-file "$ROOT/docs/latency/receptionist-questions.txt" --batch 1,16 \
            --host-batches 1,16 --out "$OUT/receptionist-$tree-$round.json"
    done
done
rm -f "$OUT"/*.png "$OUT"/*.html "$OUT"/*.md  # the JSON is the record (docs/perf.md)
