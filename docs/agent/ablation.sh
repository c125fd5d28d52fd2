#!/usr/bin/env bash
# The agent's rules, each left out in turn (docs/agent.md, "What each rule earns"):
# `bash docs/agent/ablation.sh` from the checkout root, with the venv of `make setup-dev`.
# Every run is `diffvoice eval-model` as served - the tools path (what serve and the API decode),
# the template, dialogue and independent sets, the independent set spoken in espeak-ng and in
# Kokoro voices heard by the server's default recogniser (Whisper tiny.en on a CPU), and 60
# closed-loop booking calls - once with every rule and once without each. Then
# ablation_table.py writes ablation.json and prints the Markdown table.
set -eu
OUT=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-.venv/bin/python}
EVAL=("$PY" -m diffvoice.engine.cli eval-model --paths tools
      --sets template dialogue independent spoken:whisper-tiny.en spoken-kokoro:whisper-tiny.en)
"${EVAL[@]}" --out "$OUT/ablation-all.json" > /dev/null
for rule in slot_answer follow_up later_turn_kept first_turn_snap \
            first_block grounding well_formed careful_retry replacement; do
    "${EVAL[@]}" --without "$rule" --out "$OUT/ablation-without-$rule.json" > /dev/null
done
"$PY" "$OUT/ablation_table.py" "$OUT"
