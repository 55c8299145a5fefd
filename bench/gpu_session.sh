#!/usr/bin/env bash
# The GPU rows of docs/benchmarks.md, in one sitting on a machine prepared by ../shared/gpu (H100/H200, no network):
#   bash ../shared/gpu/build_kit.sh   # here, once: writes .gpu/
#   bash bench/gpu_session.sh [part]  # there, from the project's root; part = sync | generate | compare | all | qlora
# The qlora part (not in all) needs bitsandbytes, which the kit lacks: here, slim its cp312 wheel to the CPU and
# CUDA 13.0 libraries and pack it as .gpu/bnb.tar.xz (bitsandbytes/ and its dist-info, unpacked into the kit's site):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_24_x86_64 bitsandbytes==0.50.2
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
if [ "$PART" = qlora ]; then
  # QLoRA on CUDA (issue 39): the memory rows (l05b, HF generate, TRL beside ours), the colocated vLLM rows' sync
  # exactness, the QLoRA worker under FSDP2 and ZeRO-2 launchers, and vLLM's own bitsandbytes loader.
  # $QLORA_STEPS picks some of: memory vllm launchers engine (default: all four).
  tar -xJf .gpu/bnb.tar.xz -C "$SITE"
  STEPS=" ${QLORA_STEPS:-memory vllm launchers engine} "
  MEM="--cuda --reward hash --steps 2 --prompts 4 --generations 8"
  FILTER="^(trl|ours|RESULT|\{)|Error|error:|Traceback"
  [[ $STEPS = *" memory "* ]] && timeout 200 $PY bench/memory.py $MEM --model /tmp/models/l05b --max_tokens 128 --parallel \
    --rows trl,ours,trl_lora,ours_lora,trl_qlora,ours_qlora 2>&1 | grep --line-buffered -E "$FILTER"
  [[ $STEPS = *" vllm "* ]] && timeout 150 $PY bench/memory.py $MEM --model /tmp/models/s135m --max_tokens 64 --steps 3 \
    --rows ours_vllm_lora,ours_vllm_qlora 2>&1 | grep --line-buffered -E "$FILTER"
  [[ $STEPS = *" launchers "* ]] && for config in fsdp2 zero2; do
    echo "launcher $config: ours_vllm_qlora"
    timeout 120 $PY -m accelerate.commands.launch --num_processes 1 --config_file accelerate_configs/$config.yaml bench/memory.py \
      $MEM --model /tmp/models/s135m --max_tokens 64 --worker ours_vllm_qlora 2>&1 | grep --line-buffered -E "$FILTER" | tail -20
  done
  [[ $STEPS = *" engine "* ]] && for quant in none bitsandbytes; do
    timeout 90 $PY -c "
import sys
from vllm import LLM, SamplingParams
q = None if sys.argv[1] == 'none' else sys.argv[1]
llm = LLM('/tmp/models/l05b', quantization=q, enforce_eager=True, gpu_memory_utilization=0.2)
out = llm.generate(['The answer is'], SamplingParams(max_tokens=8, temperature=0))[0].outputs[0]
print('vllm quantization', q, 'generated', len(out.token_ids), 'tokens')
" $quant 2>&1 | grep --line-buffered -E "Model loading took|^vllm quantization|Error|Traceback" | tail -8
  done
fi
