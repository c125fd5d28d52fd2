#!/bin/sh
# A/B of --asr-pause-secs (the idle pause set to the same: off) at the embedded defaults otherwise, over the browser protocol, one run
# after the other on this machine, alone. Usage: sh docs/latency/asr-pause/run.sh
set -e
for p in 0.2 0.1; do
  .venv/bin/diffvoice bench voice --corpus turns --kokoro-voices jm_kumo,jf_gongitsune \
    --concurrency 1,4 --min-turns 60 --bot-quiet-s 1.0 --pause-s 0.3 \
    --server-args "--asr-pause-secs $p --asr-idle-pause-secs $p" --out docs/latency/asr-pause/asr-pause-$p.json
done
# the third arm (after --asr-idle-pause-secs, default 0.1): serve's defaults, run after the two
# above on the same machine, alone
.venv/bin/diffvoice bench voice --corpus turns --kokoro-voices jm_kumo,jf_gongitsune \
  --concurrency 1,4 --min-turns 60 --bot-quiet-s 1.0 --pause-s 0.3 \
  --out docs/latency/asr-pause/asr-idle-pause-0.1.json
