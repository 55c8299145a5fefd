"""TRL's agent API on the real trainer: ``tools``, ``environment_factory`` (one class, a dict, an environment that
owns its data and reward) and ``rollout_func``, each written as a TRL script would with only the import changed.

Mechanics tests use the tiny random Llama with the scripted policy (tests/helpers/scripted_agent.py) in place of its
generation, since a random model never writes a tool call; `test_multi_turn_sampling_logprobs_match_the_trainers`
runs the embedded model on colocated vLLM, sampling. The scripted policy runs over the trainer's own backend (which
still generates every turn and receives every weight sync) in `test_tools_train_with_messages_reaching_the_reward`
and the asynchronous (vLLM) case; elsewhere alone (`scripted_policy`).
"""

import json
import random
import time
from dataclasses import replace

import pytest
import torch
from datasets import Dataset

from hf_grpo import DistributedGRPOTrainer as GRPOTrainer  # was: from trl import GRPOTrainer
from hf_grpo.agents import calculator
from hf_grpo.learner.batching import build_samples
from tests.helpers.rewards import even_token_reward
from tests.helpers.scripted_agent import agent_trainer_config as config
from tests.helpers.scripted_agent import scripted


def questions(n=8, calls=1):
    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"q{i} calls={calls}"}], "answer": i} for i in range(n)]
    )


def scripted_policy(trainer):
    """The scripted policy alone, its answers varied. Those tests' claims are the environments' and the loop's
    mechanics: under the policy, the random model's HF generate of each turn's whole budget (thrown away) was most
    of their time, and the loop over the trainer's real backend is run in the tests that keep it (module docstring)."""
    return scripted(trainer, real_backend=False, vary=True)


def rollout_log(out, step: int) -> list[dict]:
    return [json.loads(line) for line in (out / "rollouts" / f"step_{step:06d}.jsonl").read_text().splitlines()]


def logs(trainer):
    return [r for r in trainer.state.log_history if "loss" in r and "reward" in r]


class Counter:
    """A TRL-style environment: reset from the row, tools as public methods, the reward owned by the environment."""

    def reset(self, **row) -> str:
        self.total, self.target = 0, 3
        return f" Reach {self.target}."

    def increment(self, step: int) -> str:
        """Add to the counter.

        Args:
            step: How much to add.
        """
        self.total += step
        return f"total={self.total}"

    def get_reward(self) -> float:
        return float(self.total == self.target)

    def _private(self) -> None:
        raise AssertionError("private methods are not tools")


INCREMENT = 'call=<tool_call>{"name": "increment", "arguments": {"step": 1}}</tool_call>'


def test_tools_train_with_messages_reaching_the_reward(tiny_llama_path, tmp_path):
    seen = []

    def reward(completions, answer, **kwargs):
        seen.extend(completions)
        return [float(len(c[-1]["content"])) for c in completions]  # answers vary in a group

    trainer = scripted(
        GRPOTrainer(
            model=tiny_llama_path,
            reward_funcs=[reward],
            # 128 tokens: the two calls, their observations and the answer take 119; the real backend under the
            # script generates each turn's whole remaining budget.
            args=config(tmp_path, plot_metrics=True, max_completion_length=128),
            train_dataset=questions(calls=2),
            tools=[calculator],
        )
    )
    assert trainer.tools == [calculator] and trainer.reward_funcs == [reward]  # TRL's attributes
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert (tmp_path / "out" / "training_curves.png").stat().st_size > 1000  # with tool calls per rollout
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    assert [m["role"] for m in seen[0]] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert seen[0][1] == {"role": "tool", "name": "calculator", "content": "42"}
    for r in logs(trainer):
        assert r["tools/call_frequency"] == 2.0 and r["tools/calculator/calls"] > 0
        # Lengths count the policy's tokens only (TRL); the observation tokens are counted apart.
        assert r["completions/mean_total_length"] > r["completions/mean_length"]
        assert r["rollout/observation_tokens_mean"] == pytest.approx(
            r["completions/mean_total_length"] - r["completions/mean_length"]
        )


def test_observation_tokens_are_out_of_the_loss_mask(tiny_llama_path, tmp_path):
    trainer = scripted_policy(
        GRPOTrainer(
            model=tiny_llama_path,
            reward_funcs=[even_token_reward],
            args=config(tmp_path),
            train_dataset=questions(calls=1),
            tools=[calculator],
        )
    )
    batch = trainer.collector.collect([trainer.train_dataset[i] for i in range(2)])
    samples = build_samples(batch, torch.ones(4), mask_truncated=False)
    for sample, mask, ids in zip(samples, batch.completion_mask, batch.completion_ids):
        assert sample["completion_mask"].tolist() == [float(m) for m in mask]
        observation = [t for t, m in zip(ids, mask) if m == 0]
        assert trainer.processing_class.decode(observation) == (
            "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        )


def test_observation_tokens_are_out_of_the_kl(tiny_llama_path, tmp_path):
    """With beta > 0 the loss does not depend on the reference's log-probs at observation tokens (tool output the
    policy did not sample): moving them leaves the micro-batch's loss exactly unchanged."""
    trainer = scripted_policy(
        GRPOTrainer(
            model=tiny_llama_path,
            reward_funcs=[even_token_reward],
            args=config(tmp_path, beta=0.5, loss_type="dapo", skip_zero_advantage=False),
            train_dataset=questions(calls=1),
            tools=[calculator],
        ),
    )
    trainer.state.max_steps = 1
    batch = trainer._generate_and_score([trainer.train_dataset[i] for i in range(2)])[0]
    mask = batch.completion_mask  # [B, C]
    observation = batch.attention_mask[:, -mask.shape[1] :].bool() & (mask == 0)  # [B, C] tool output
    assert observation.any() and batch.ref_logp is not None
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, batch)
        moved = trainer.compute_loss(trainer.model, replace(batch, ref_logp=batch.ref_logp - 5.0 * observation))
        # The KL does act on the policy's own tokens: moving the reference there changes the loss.
        sampled = trainer.compute_loss(trainer.model, replace(batch, ref_logp=batch.ref_logp - 5.0 * mask))
    assert torch.equal(moved, loss)
    assert not torch.equal(sampled, loss)


def test_single_environment_class(tiny_llama_path, tmp_path):
    def reward(completions, environments, **kwargs):  # TRL passes the rollouts' environments to rewards
        assert all(isinstance(e, Counter) for e in environments)
        return [0.0] * len(completions)

    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Count. calls=3\n{INCREMENT}"}]}] * 8)
    args = config(tmp_path, reward_weights=[2.0])
    trainer = scripted_policy(
        GRPOTrainer(
            model=tiny_llama_path,
            reward_funcs=[reward],
            args=args,
            train_dataset=dataset,
            environment_factory=Counter,
        )
    )
    assert trainer.reward_runner.names == ["reward", "Counter"]
    # The user's weights, then weight 1 for the environment's reward (TRL); the config keeps the user's list.
    assert trainer.reward_weights.tolist() == [2.0, 1.0] and args.reward_weights == [2.0]
    # TRL's public attributes: the environment's reward after the user's; its tools, not reset/get_reward.
    assert trainer.reward_funcs[0] is reward and trainer.reward_funcs[1].__name__ == "Counter"
    assert [t.__name__ for t in trainer.tools] == ["increment"]
    batch = trainer.collector.collect([dataset[0], dataset[1]])
    assert batch.completions[0][1]["content"] == "total=1" and batch.completions[0][5]["content"] == "total=3"
    assert trainer.processing_class.decode(batch.completion_prompt_ids[0]).endswith(
        f"Count. calls=3\n{INCREMENT} Reach 3.<|im_end|>\n<|im_start|>assistant\n"
    )  # reset's text appended
    assert batch.rewards_per_func[:, 1].tolist() == [1.0] * 4  # get_reward, weight 1
    assert "increment" in trainer.agent.envs.tool_names and "_private" not in trainer.agent.envs.tool_names
    trainer.train()


class Doubler(Counter):
    def reset(self, **row) -> None:
        self.total, self.target = 1, 2

    def double(self) -> str:
        """Double the counter."""
        self.total *= 2
        return f"total={self.total}"


def test_dict_of_environments_routes_by_the_environment_column(tiny_llama_path, tmp_path):
    double = 'call=<tool_call>{"name": "double", "arguments": {}}</tool_call>'
    rows = [
        {"prompt": [{"role": "user", "content": f"calls=1\n{INCREMENT}"}], "environment": "counter"},
        {"prompt": [{"role": "user", "content": f"calls=1\n{double}"}], "environment": "doubler"},
    ] * 4
    trainer = scripted_policy(
        GRPOTrainer(
            model=tiny_llama_path,
            args=config(tmp_path),
            train_dataset=Dataset.from_list(rows),
            environment_factory={"counter": Counter, "doubler": Doubler},
        )
    )
    batch = trainer.collector.collect(rows[:2])
    assert batch.completions[0][1]["content"] == "total=1" and batch.completions[2][1]["content"] == "total=2"
    # Each class's reward scores its own rollouts only (None elsewhere), as TRL's do.
    names = trainer.reward_runner.names
    counter, doubler = (
        batch.rewards_per_func[:, names.index("Counter")],
        batch.rewards_per_func[:, names.index("Doubler")],
    )
    assert counter[:2].tolist() == [0.0, 0.0] and torch.isnan(counter[2:]).all()
    assert doubler[2:].tolist() == [1.0, 1.0] and torch.isnan(doubler[:2]).all()
    assert [t.__name__ for t in trainer.tools] == ["increment", "double"]  # the union, each name once
    with pytest.raises(ValueError, match="environment='nope' is not among the environments of environment_fac"):
        trainer.collector.collect([{**rows[0], "environment": "nope"}])


class Scripted:
    """An environment whose reset takes no arguments and supplies the whole task (TRL's routing datasets)."""

    def reset(self) -> str:
        return f"calls=1\n{INCREMENT}"

    def increment(self, step: int) -> str:
        """Add to the counter.

        Args:
            step: How much to add.
        """
        return f"added {step}"


def test_rows_with_only_an_environment_column_get_an_empty_prompt(tiny_llama_path, tmp_path):
    """TRL: a dataset that only routes (an ``environment`` column) is accepted; each row's prompt is an empty user
    message that reset()'s observation completes, and the placeholder is not passed to reset()."""
    reset_arguments = []

    class Recording(Counter):
        def reset(self, **row) -> str:
            reset_arguments.append(row)
            super().reset()
            return f"calls=1\n{INCREMENT}"

    rows = Dataset.from_dict({"environment": ["counter", "scripted"] * 4})
    trainer = scripted_policy(
        GRPOTrainer(
            model=tiny_llama_path,
            args=config(tmp_path),
            train_dataset=rows,
            environment_factory={"counter": Recording, "scripted": Scripted},
        )
    )
    assert trainer.train_dataset[0]["prompt"] == [{"role": "user", "content": ""}]
    batch = trainer.collector.collect([trainer.train_dataset[0], trainer.train_dataset[1]])
    assert reset_arguments == [{}, {}]  # neither the placeholder prompt nor the routing column
    assert batch.completions[0][1] == {"role": "tool", "name": "increment", "content": "total=1"}
    assert batch.completions[2][1] == {"role": "tool", "name": "increment", "content": "added 1"}
    with pytest.raises(Exception, match="row matches no known format"):  # without an environment: still an error
        GRPOTrainer(model=tiny_llama_path, reward_funcs=[even_token_reward], args=config(tmp_path), train_dataset=rows)


class Guess:
    """An environment that owns its data (reset supplies the task) and its reward; no train_dataset."""

    def reset(self, seed: int, **row) -> str:
        self.secret = random.Random(seed).randint(0, 9)
        return 'Guess my number. calls=1\ncall=<tool_call>{"name": "guess", "arguments": {"n": 4}}</tool_call>'

    def guess(self, n: int) -> str:
        """Make a guess.

        Args:
            n: The guess.
        """
        self.last = n
        return "right" if n == self.secret else "wrong"

    def get_reward(self) -> float:
        return float(self.last == self.secret)


def test_environment_owns_data_and_reward_and_groups_share_a_task(tiny_llama_path, tmp_path):
    with pytest.raises(ValueError, match="max_steps"):
        GRPOTrainer(
            model=tiny_llama_path, args=config(tmp_path, max_steps=-1, num_train_epochs=1), environment_factory=Guess
        )
    trainer = scripted_policy(
        GRPOTrainer(model=tiny_llama_path, args=config(tmp_path, num_generations=4), environment_factory=Guess)
    )
    assert len(trainer.train_dataset) == 1  # one round of placeholder prompts, cycled
    batch = trainer.collector.collect([trainer.train_dataset[0]] * 2)
    secrets = [e.secret for e in trainer.agent.envs.start([trainer.train_dataset[0]] * 2, 4, 0, 0)[0]]
    assert secrets[:4] == [secrets[0]] * 4 and secrets[4:] == [secrets[4]] * 4  # one task per group
    assert batch.agent_metrics["env/inconsistent_groups"] == 0.0
    trainer.train()
    assert trainer.state.global_step == 2


def test_rollout_func_with_env_mask_and_extra_fields(tiny_llama_path, tmp_path):
    seen = {}

    def rollout_func(prompts, trainer):
        tok = trainer.processing_class
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "judge_notes": []}
        for p in prompts:
            ids = tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False)
            out["prompt_ids"].append(ids)
            for g in range(trainer.args.num_generations):
                model_part = tok(f"answer {g}", add_special_tokens=False)["input_ids"]
                env_part = tok(" [env says ok]", add_special_tokens=False)["input_ids"]
                out["completion_ids"].append(model_part + env_part + [tok.eos_token_id])
                out["logprobs"].append([-1.0] * (len(model_part) + len(env_part) + 1))
                out["env_mask"].append([1] * len(model_part) + [0] * len(env_part) + [1])
                out["judge_notes"].append(f"note {g}")
        return out

    def reward(completions, judge_notes, **kwargs):
        seen["notes"] = judge_notes
        return [float(n[-1]) for n in judge_notes]

    trainer = GRPOTrainer(
        model=tiny_llama_path,
        reward_funcs=[reward],
        args=config(tmp_path),
        train_dataset=questions(),
        rollout_func=rollout_func,
    )
    batch = trainer.collector.collect([trainer.train_dataset[0], trainer.train_dataset[1]])
    assert seen["notes"] == ["note 0", "note 1"] * 2
    assert all(
        m.count(0) == len(trainer.processing_class(" [env says ok]", add_special_tokens=False)["input_ids"])
        for m in batch.completion_mask
    )
    assert batch.finished == [True] * 4
    trainer.train()
    with pytest.raises(ValueError, match="must return keys \\['logprobs'\\]"):
        GRPOTrainer(
            model=tiny_llama_path,
            reward_funcs=[reward],
            args=config(tmp_path / "b"),
            train_dataset=questions(),
            rollout_func=lambda prompts, trainer: {"prompt_ids": [], "completion_ids": []},
        ).train()


VLLM = {"generation_backend": "vllm", "vllm_enforce_eager": True, "vllm_kv_cache_gib": 0.25, "max_prompt_length": 256}


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        {"max_staleness": 1, **VLLM},  # the asynchronous pipeline: round 2 is generated while step 1 trains
        {"max_tokens_per_microbatch": 1024},  # packing
        {"dynamic_sampling": True, "dynamic_sampling_criterion": "reward_std"},  # DAPO's dynamic sampling
        {"use_peft": True, "learning_rate": 1e-2},  # LoRA
    ],
    ids=["async", "packing", "dynamic_sampling", "lora"],
)
def test_multi_turn_with_training_options(tiny_llama_path, vllm_tiny_path, tmp_path, options):
    pipeline = "max_staleness" in options
    trainer = GRPOTrainer(
        model=vllm_tiny_path if pipeline else tiny_llama_path,
        reward_funcs=[even_token_reward],
        args=config(tmp_path, **options),
        train_dataset=questions(calls=2),
        tools=[calculator],
    )
    # The options act on the rollouts' samples; the pipeline also drives the engine, so it keeps it under the script.
    trainer = scripted(trainer) if pipeline else scripted_policy(trainer)
    trainer.train()
    trainer.generator.close()
    steps = logs(trainer)
    assert len(steps) == 2
    assert all(r["tools/call_frequency"] == 2.0 and r["rollout/termination/eos"] == 1.0 for r in steps)


@pytest.mark.slow
def test_a_rollout_in_flight_survives_a_weight_update_while_its_tool_runs(vllm_tiny_path, tmp_path):
    """Partial rollouts (``keep``) with a tool, on the colocated engine. The policy's turns are held to one tool call
    by the regex (a random model writes none); the tool waits for the next weight update (5 s at most). Round ``k``
    is generated while step ``k`` trains round ``k - 1``, so its tool returns when that step's update lands, and the
    rollout's second turn is sampled by the new weights: the rollout spans two versions, its observation tokens
    labelled -1. Without partial rollouts the update would wait for the round, and the tool would time out."""
    holder = {}

    def wait_for_update() -> str:
        """Wait for the next weight update."""
        generator = holder["trainer"].generator
        start, deadline = generator.weight_version, time.monotonic() + 5
        while generator.weight_version == start and time.monotonic() < deadline:
            time.sleep(0.01)
        return f"version {generator.weight_version}"

    trainer = GRPOTrainer(
        model=vllm_tiny_path,
        reward_funcs=[even_token_reward],
        args=config(
            tmp_path,
            max_steps=3,
            max_staleness=1,
            partial_rollouts="keep",
            max_tool_calling_iterations=1,
            vllm_structured_outputs_regex=r'<tool_call>\{"name": "wait_for_update", "arguments": \{\}\}</tool_call>',
            log_completions_steps=1,
            **VLLM,
        ),
        train_dataset=questions(),
        tools=[wait_for_update],
    )
    holder["trainer"] = trainer
    trainer.train()
    trainer.generator.close()
    assert all(r["tools/call_frequency"] == 1.0 for r in logs(trainer))
    for step in (2, 3):  # rounds 1 and 2: sampled across the update of steps 1 and 2
        for record in rollout_log(tmp_path / "out", step):
            versions = [v for v, _, _ in record["version_spans"]]
            assert versions == [step - 2, -1, step - 1], (step, record["version_spans"])
    assert [r["async/version_spread"] for r in logs(trainer)][1:] == [1.0, 1.0]


@pytest.mark.slow
def test_multi_turn_sampling_logprobs_match_the_trainers(smol_path, tmp_path):
    """The embedded model on colocated vLLM (fp32, sampling at temperature 1) with the calculator and the agent task's
    two demonstrations: 8 rollouts, which make 4 tool calls at seed 1 (seeds 2 and 3 make 2, 42 none: one
    calling rollout is all the claim needs; 16 rollouts at seed 42 made 5). Over the policy's tokens the sampler's
    log-probs equal the trainer's, as they do single-turn (tests/test_trainer_options.py): the row is exactly what
    the engine saw. An observation token in the ratio would add |0 - logp| (0.0 is what the loop records for it,
    and its trainer log-prob is far from 0), a row that re-tokenized a turn would shift every later token."""
    from hf_grpo.data import load_prompt_dataset
    from hf_grpo.evaluation import final_number_reward

    args = config(
        tmp_path,
        max_steps=1,
        per_device_train_batch_size=8,
        num_generations=4,
        seed=1,
        max_completion_length=96,
        max_tool_calling_iterations=2,
        learning_rate=1e-6,
        **{**VLLM, "vllm_kv_cache_gib": 1.0, "max_prompt_length": 512},
    )
    trainer = GRPOTrainer(
        model=smol_path,
        reward_funcs=[final_number_reward],
        args=args,
        train_dataset=load_prompt_dataset("multiplication:32"),
        tools=[calculator],
    )
    trainer.train()
    trainer.generator.close()
    (log,) = logs(trainer)
    assert log["rollout/observation_tokens_mean"] > 0 and log["tools/calculator/calls"] > 0, log
    assert log["sampling/logp_difference/max"] < 1e-3, log
