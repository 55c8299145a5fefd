#!/usr/bin/env bash
# The GPU rows of docs/benchmarks.md, in one sitting on a machine prepared by ../shared/gpu (H100/H200, no network):
#   bash ../shared/gpu/build_kit.sh   # here, once: writes .gpu/
#   bash bench/gpu_session.sh [part]  # there, from the project's root; part = sync | generate | compare | all
# Each run has its own timeout so that one failure does not cost the sitting.
set -uo pipefail
source .gpu/setup.sh
PART=${1:-all}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if [ "$PART" = sync ] || [ "$PART" = all ]; then
  timeout 300 python3 bench/weight_sync.py --device cuda --dtype bfloat16 --model /tmp/models/l05b --repeats 10 2>&1 \
    | grep -v -E "^(INFO|DEBUG)|it/s\]$|Failed to load weights"
fi
if [ "$PART" = generate ] || [ "$PART" = all ]; then
  timeout 300 python3 bench/hf_generate.py --model /tmp/models/s135m --dtype bfloat16 --prompts 16 --n 8 \
    --max-tokens 256 --repeats 2 2>&1 | grep -v -E "^(INFO|DEBUG)|it/s\]$|Loading weights"
fi
if [ "$PART" = compare ] || [ "$PART" = all ]; then
  timeout 540 python3 bench/compare_trl.py --cuda --model /tmp/models/s135m --reward hash --prompts 16 \
    --max_tokens 256 --steps 3 --warmup 1 --dtype bfloat16 ${COMPARE_FLAGS:-} 2>&1 | grep -E "^(run|  hf_grpo|shape|trainer|TRL|hf_grpo|RESULT)|Error|Traceback"
fi
