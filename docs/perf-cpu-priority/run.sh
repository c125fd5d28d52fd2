#!/bin/bash
# Issue 54's scheduler priorities, timed against the commit before them (cec9f75) on every
# family: export both trees first (git archive cec9f75 | tar -x -C /tmp/ab/base/diffvoice, the
# same for the commit under test into /tmp/ab/after/diffvoice), run from the repository root.
# Makes the random checkpoints once, then base/after alternately, three rounds.
. .venv/bin/activate
for f in sdar fast_dllm_v2 llada dream; do
  [ -d /tmp/ab/ckpt/$f ] || python -c "from diffvoice.engine.testing import make_random_checkpoint as m; m('/tmp/ab/ckpt/$f', family='$f', seed=1)"
done
for round in 1 2 3; do
  for f in sdar fast_dllm_v2 llada dream; do
    for v in base after; do
      PYTHONPATH=/tmp/ab/$v python docs/perf-cpu-priority/drive.py $f /tmp/ab/ckpt/$f | sed "s/^/{\"round\": $round, \"v\": \"$v\", \"r\": /; s/\$/}/"
    done
  done
done
