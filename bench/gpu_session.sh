#!/usr/bin/env bash
# The GPU rows of docs/benchmarks.md, in one sitting on a machine prepared by ../shared/gpu (H100/H200, no network):
#   bash ../shared/gpu/build_kit.sh   # here, once: writes .gpu/
#   bash bench/gpu_session.sh [part]  # there, from the project's root; part = sync | generate | compare | all
# Each run has its own timeout so that one failure does not cost the sitting.
#
# CPU dry run, without a GPU or the kit: `bash bench/gpu_session.sh --dry-run [part]` runs the same steps through the
# same timeouts and output filters, at their tiniest shape on $DRY_MODEL (default: the embedded model) with
# $PYTHON (default: .venv/bin/python), on the CPU: weight_sync with --device cpu, compare_trl without --cuda (so
# without its TRL-colocated-vLLM and asynchronous rows). It ends with
#   RESULT gpu_session mode=dry_run results=<steps that printed their RESULT line>/<steps>
# and fails unless every step did. It shows the session's scripts still run with its flags; it measures nothing,
# and the CUDA paths (direct weight copy, bf16 autocast, --cuda rows) are not exercised.
set -uo pipefail
if [ "${1:-}" = --dry-run ]; then
  shift
  LOG=$(mktemp)
  GPU_SESSION_DRY_RUN=1 bash "$0" "$@" | tee "$LOG"
  STEPS=$([ "${1:-all}" = all ] && echo 3 || echo 1)
  DONE=$(grep -c "^RESULT " "$LOG")
  rm -f "$LOG"
  echo "RESULT gpu_session mode=dry_run results=$DONE/$STEPS"
  [ "$DONE" = "$STEPS" ]
  exit
fi
PART=${1:-all}
if [ "${GPU_SESSION_DRY_RUN:-0}" = 1 ]; then
  PY=${PYTHON:-.venv/bin/python}
  MODEL=${DRY_MODEL:-smollm2-135m}
  SYNC="--device cpu --dtype bfloat16 --model $MODEL --repeats 1"
  GENERATE="--model $MODEL --dtype bfloat16 --prompts 1 --n 2 --max-tokens 8 --repeats 1"
  COMPARE="--model $MODEL --reward hash --prompts 1 --generations 2 --max_tokens 8 --steps 1 --warmup 0"
  COMPARE="$COMPARE --dtype bfloat16"
else
  source .gpu/setup.sh
  PY=python3
  SYNC="--device cuda --dtype bfloat16 --model /tmp/models/l05b --repeats 10"
  GENERATE="--model /tmp/models/s135m --dtype bfloat16 --prompts 16 --n 8 --max-tokens 256 --repeats 2"
  COMPARE="--cuda --model /tmp/models/s135m --reward hash --prompts 16 --max_tokens 256 --steps 3 --warmup 1"
  COMPARE="$COMPARE --dtype bfloat16"
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
fi
if [ "$PART" = sync ] || [ "$PART" = all ]; then
  timeout 300 $PY bench/weight_sync.py $SYNC 2>&1 | grep -v -E "^(INFO|DEBUG)|it/s\]$|Failed to load weights"
fi
if [ "$PART" = generate ] || [ "$PART" = all ]; then
  timeout 300 $PY bench/hf_generate.py $GENERATE 2>&1 | grep -v -E "^(INFO|DEBUG)|it/s\]$|Loading weights"
fi
if [ "$PART" = compare ] || [ "$PART" = all ]; then
  timeout 540 $PY bench/compare_trl.py $COMPARE ${COMPARE_FLAGS:-} 2>&1 \
    | grep -E "^(run|  hf_grpo|shape|trainer|TRL|hf_grpo|RESULT)|Error|Traceback"
fi
