#!/usr/bin/env bash
# Issue 40 item 4 (docs/perf.md, "The fused decode path"): `bash docs/perf-cpu-kernels/run.sh`
# from the checkout root, with the venv of `make setup-dev`. Counts aten operators per layer per
# pass (count.py) on the checkout before the fused decode path (BASE, a temporary git worktree,
# given this checkout's counting code: engine/profiling.py and latency_bench/engine_host.py)
# and on this one. Writes JSON beside this file.
set -eu
OUT=$(cd "$(dirname "$0")" && pwd)
ROOT=$(pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
BASE=${BASE:-e553081}
TMP=$(mktemp -d)
git worktree add -q --detach "$TMP/base" "$BASE"
cp engine/profiling.py "$TMP/base/engine/profiling.py"
cp latency_bench/engine_host.py "$TMP/base/latency_bench/engine_host.py"
mkdir "$TMP/pkg" && ln -s "$TMP/base" "$TMP/pkg/diffvoice"  # `import diffvoice` -> BASE
trap 'git worktree remove --force "$TMP/base"; rm -rf "$TMP"' EXIT
export TRITON_INTERPRET=1
(cd "$TMP" && PYTHONPATH="$TMP/pkg" "$PY" "$OUT/count.py" "$OUT/aten-ops-base.json")
(cd "$TMP" && "$PY" "$OUT/count.py" "$OUT/aten-ops-after.json")
