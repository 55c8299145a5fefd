"""TRL GRPOTrainer behaviours users hit, on the real trainer (tiny random Llama, HF generation): streaming datasets,
`evaluate()`'s keys (eval_loss, num_generations_eval), spawn dataloader workers, init-time diagnostics, images."""

import json
import multiprocessing

import pytest
import torch
from datasets import IterableDataset, IterableDatasetDict

from hf_grpo import DistributedGRPOTrainer
from hf_grpo.data import DataFormatError, load_prompt_dataset
from hf_grpo.evaluation.in_training import eval_loss_value
from tests.helpers.rewards import even_token_reward
from tests.helpers.trainers import make_config


def rows(n, start=0):
    return [
        {"prompt": [{"role": "user", "content": f"What is {i} + 1?"}], "gt_answer": str(i + 1)}
        for i in range(start, start + n)
    ]


def stream(items):
    return IterableDataset.from_generator(lambda: iter(items))


# ---- streaming ----------------------------------------------------------------------------------------------------
def test_streaming_train_needs_max_steps_and_checks_rows_as_drawn(tiny_llama_path, tmp_path):
    with pytest.raises(DataFormatError, match="IterableDataset .* set max_steps"):
        DistributedGRPOTrainer(
            tiny_llama_path, [even_token_reward], make_config(tmp_path, max_steps=-1), stream(rows(8))
        )
    bad = rows(8) + [{"prompt": [{"role": "bot", "content": "x"}]}]
    trainer = DistributedGRPOTrainer(
        tiny_llama_path, [even_token_reward], make_config(tmp_path, max_steps=1), stream(bad)
    )
    with pytest.raises(DataFormatError, match=r"train_dataset\[8\]: key 'prompt\[0\].role'"):
        list(trainer.train_dataset)


def test_streaming_train_two_steps_draws_distinct_blocks_and_counts_drops(tiny_llama_path, tmp_path, caplog):
    data = rows(2) + [{"prompt": [{"role": "user", "content": "long " * 80}], "gt_answer": "0"}] + rows(6, 2)
    trainer = DistributedGRPOTrainer(
        tiny_llama_path, [even_token_reward], make_config(tmp_path, max_steps=2, max_prompt_length=40), stream(data)
    )
    # per_device 8 / G 4 = 2 prompts a round, yielded once per micro-batch of the round.
    drawn = [r["prompt"][0]["content"] for r in trainer.train_dataset]
    assert drawn == [f"What is {i} + 1?" for i in range(8)]
    assert trainer.train_dataset.checker.dropped == 1 and "dropped 1 of 9 streamed prompts" in caplog.text
    trainer.train()
    assert trainer.state.global_step == 2
    assert [r for r in trainer.state.log_history if "reward" in r]


def test_evaluate_iterable_and_dict_of_sets_returns_trl_keys(tiny_llama_path, tmp_path):
    evals = IterableDatasetDict({"a": stream(rows(3)), "b": stream(rows(2, 10))})
    trainer = DistributedGRPOTrainer(
        tiny_llama_path,
        [even_token_reward],
        make_config(tmp_path, max_steps=1, num_generations_eval=3),
        load_prompt_dataset("arithmetic:16"),
        eval_dataset=evals,
    )
    metrics = trainer.evaluate()
    for name, count in (("a", 3), ("b", 2)):
        assert metrics[f"eval_{name}_samples"] == count
        assert 0.0 <= metrics[f"eval_{name}_mean_accuracy@3"] <= metrics[f"eval_{name}_pass@3"] <= 1.0
        assert torch.isfinite(torch.tensor(metrics[f"eval_{name}_loss"]))
    assert metrics["eval_loss"] == metrics["eval_a_loss"]
    one = trainer.evaluate(stream(rows(2)))
    assert one["eval_eval_samples"] == 2 and "eval_loss" in one and "eval_eval_pass@3" in one


# ---- eval loss: the on-policy GRPO loss, hand-computed -----------------------------------------------------------
def test_eval_loss_value_matches_hand_computation(tmp_path):
    logp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])  # [2, 3]
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # [2, 3]
    adv = torch.tensor([1.0, -1.0])  # [2]
    # Ratio 1: per-token loss = -A. grpo: mean over sequences of each one's token mean = (-1 + 1) / 2 = 0.
    assert eval_loss_value(logp, adv, mask, make_config(tmp_path, loss_type="grpo")).item() == pytest.approx(0.0)
    # dapo: sum over tokens / active tokens = (-1 - 1 + 1) / 3.
    dapo = make_config(tmp_path, loss_type="dapo")
    assert eval_loss_value(logp, adv, mask, dapo).item() == pytest.approx(-1 / 3)
    # beta > 0 adds beta x k3(ref, logp) per token: ref = logp - 1 on every token gives exp(-1) - (-1) - 1.
    kl = make_config(tmp_path, loss_type="dapo", beta=0.5)
    expected = -1 / 3 + 0.5 * (torch.exp(torch.tensor(-1.0)) + 1 - 1).item()
    assert eval_loss_value(logp, adv, mask, kl, ref_logp=logp - 1).item() == pytest.approx(expected, rel=1e-5)


# ---- diagnostics at init --------------------------------------------------------------------------------------------
def test_missing_train_dataset_is_trl_error_at_init(tiny_llama_path, tmp_path):
    with pytest.raises(ValueError, match=r"`train_dataset` is required unless an `environment_factory` is provided"):
        DistributedGRPOTrainer(tiny_llama_path, [even_token_reward], make_config(tmp_path))


@pytest.mark.parametrize(
    "row,message",
    [
        (
            {"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what?"}]}]},
            r"train_dataset\[1\]: key 'prompt\[0\].content\[0\]': a 'image' content part; images go in the row's "
            r"'image' or 'images' column",
        ),
        (
            {"prompt": [{"role": "user", "content": "what?"}], "image": "x.png"},
            r"train_dataset\[1\]: key 'image': image file '.*x.png' does not exist",
        ),
    ],
)
def test_images_fail_at_start_naming_row_and_key(tiny_llama_path, tmp_path, row, message):
    with pytest.raises(DataFormatError, match=message):
        DistributedGRPOTrainer(tiny_llama_path, [even_token_reward], make_config(tmp_path), [rows(1)[0], row])


def test_images_for_a_text_only_model_fail_at_start(tiny_llama_path, tmp_path):
    from PIL import Image

    image_rows = [{"prompt": [{"role": "user", "content": "what?"}], "image": Image.new("RGB", (8, 8))}] * 2
    with pytest.raises(ValueError, match=r"train_dataset has the image column 'image', but the model "):
        DistributedGRPOTrainer(tiny_llama_path, [even_token_reward], make_config(tmp_path), image_rows)


# ---- dataloader workers under spawn -------------------------------------------------------------------------------
@pytest.mark.slow
def test_spawn_dataloader_worker_trains(tiny_llama_path, tmp_path):
    """A script that sets the spawn start method (macOS and Windows have no other): the dataloader pickles its
    collator and dataset into the spawned worker. Run in this process with the start method set around it (a worker
    started by spawn imports what it unpickles afresh either way; a second interpreter only added its own start-up)."""
    previous = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)
    try:
        args = make_config(tmp_path, max_steps=1, dataloader_num_workers=1)
        trainer = DistributedGRPOTrainer(
            tiny_llama_path, [even_token_reward], args, load_prompt_dataset("arithmetic:16")
        )
        loader = trainer.get_train_dataloader()
        assert loader.num_workers == 1 and multiprocessing.get_start_method() == "spawn"
        trainer.train()
    finally:
        multiprocessing.set_start_method(previous, force=True)
    assert trainer.state.global_step == 1


# ---- batch arithmetic: what TRL accepts is accepted; what is refused says why -------------------------------------
def test_batch_arithmetic_accepts_trls_and_explains_refusals(tmp_path):
    # TRL: generation_batch_size a multiple of the global batch sets steps_per_generation (here 3, GA 1).
    assert make_config(tmp_path, generation_batch_size=24, per_device_train_batch_size=8).steps_per_generation == 3
    assert make_config(tmp_path, steps_per_generation=4, gradient_accumulation_steps=2).prompts_per_generation == 8
    # TRL: steps_per_generation need not be a multiple of gradient_accumulation_steps (trained in test_trainer.py).
    assert make_config(tmp_path, steps_per_generation=3, gradient_accumulation_steps=2).prompts_per_generation == 6
    assert make_config(tmp_path, steps_per_generation=1, gradient_accumulation_steps=2).prompts_per_generation == 2
    with pytest.raises(
        ValueError,
        match=r"max_staleness needs steps_per_generation \(3\) to be a multiple of "
        r"gradient_accumulation_steps \(2\): a round's staleness",
    ):
        make_config(
            tmp_path, steps_per_generation=3, gradient_accumulation_steps=2, max_staleness=1, generation_backend="vllm"
        )
    with pytest.raises(ValueError, match=r"multiple of num_generations \(4\); groups never straddle processes"):
        make_config(tmp_path, per_device_train_batch_size=6)
    with pytest.raises(ValueError, match="set generation_batch_size or steps_per_generation, not both"):
        make_config(tmp_path, generation_batch_size=16, steps_per_generation=1)
    with pytest.raises(ValueError, match="num_generations_eval must be >= 1"):
        make_config(tmp_path, num_generations_eval=0)


def test_streaming_resume_continues_the_stream_without_repeating(tiny_llama_path, tmp_path, monkeypatch):
    from tests.helpers.rewards import recording_reward

    def run(record, out, steps, resume=None):
        monkeypatch.setenv("HF_GRPO_TEST_RECORD", str(record))
        args = make_config(tmp_path, output_dir=str(out), max_steps=steps, save_strategy="steps", save_steps=1)
        trainer = DistributedGRPOTrainer(tiny_llama_path, [recording_reward], args, stream(rows(12)))
        trainer.train(resume_from_checkpoint=resume)
        return [json.loads(line) for line in record.read_text().splitlines()]

    full = run(tmp_path / "full.jsonl", tmp_path / "a", 3)  # a checkpoint at every step
    resumed = run(tmp_path / "resumed.jsonl", tmp_path / "b", 3, resume=str(tmp_path / "a" / "checkpoint-1"))
    assert [r["step"] for r in resumed] == [1, 2]
    assert [r["prompts"] for r in resumed] == [r["prompts"] for r in full[1:]]
    assert len({tuple(r["prompts"]) for r in full}) == 3  # each step drew new prompts


def test_streamed_rounds_give_each_process_distinct_prompts(tokenizer, tmp_path):
    """Two processes: accelerate's shard of the stream (what `prepare` wraps it in with dispatch_batches=False) hands
    each process its own half of every round, repeated for each micro-batch of the round."""
    from accelerate.data_loader import IterableDatasetShard

    from hf_grpo.data.streaming import RowChecker, StreamedPrompts

    args = make_config(tmp_path, steps_per_generation=2, per_device_train_batch_size=4, num_generations=4)
    block = args.prompts_per_generation * 2  # 2 prompts per process per round, 2 processes
    streamed = StreamedPrompts(
        stream(rows(9)),
        RowChecker(tokenizer, args, "train_dataset", None, None),
        block,
        repeats=args.steps_per_generation,
    )
    seen = [
        [
            r["gt_answer"]
            for r in IterableDatasetShard(
                streamed, batch_size=args.prompts_per_generation, num_processes=2, process_index=p
            )
        ]
        for p in range(2)
    ]
    # Rounds of 4 rows (the 9th row is an incomplete round), each process's 2 rows yielded twice.
    assert seen[0] == ["1", "2", "1", "2", "5", "6", "5", "6"]
    assert seen[1] == ["3", "4", "3", "4", "7", "8", "7", "8"]
    assert streamed.incomplete_blocks == 2  # one per pass: each shard above read the stream once


# ---- TRL's public helpers, attributes and wording ------------------------------------------------------------------
def test_trls_helpers_and_attributes_mean_what_trls_do(tiny_llama_path, tmp_path):
    from types import SimpleNamespace

    from trl import GRPOTrainer as TRLTrainer

    trainer = DistributedGRPOTrainer(
        tiny_llama_path, [even_token_reward], make_config(tmp_path, max_steps=1, entropy_coef=0.05), stream(rows(8))
    )
    # The same tensors through TRL's own methods (one process: TRL's gathers are identities).
    one_process = SimpleNamespace(
        accelerator=SimpleNamespace(
            num_processes=1, gather=lambda x: x, pad_across_processes=lambda x, dim, pad_index: x
        )
    )
    torch.manual_seed(0)
    entropies, mask = torch.rand(4, 7), (torch.rand(4, 7) > 0.3).long()
    for threshold in (0.0, 0.5, 0.8, 1.0):
        ours = trainer.get_high_entropy_mask(entropies, mask, threshold)
        assert ours.dtype == torch.bool
        assert torch.equal(ours, TRLTrainer.get_high_entropy_mask(one_process, entropies, mask, threshold)), threshold
    advantages, logp, sampling = torch.randn(4, 1), -torch.rand(4, 7), -torch.rand(4, 7)
    assert torch.equal(
        DistributedGRPOTrainer.get_off_policy_mask(advantages, logp, sampling, mask.float(), 0.1),
        TRLTrainer.get_off_policy_mask(advantages, logp, sampling, mask.float(), 0.1),
    )
    assert trainer.entropy_coef == 0.05 and trainer.reward_func_names == ["even_token_reward"]
    assert trainer.reward_weights.tolist() == [1.0]


def test_diagnostics_carry_trls_wording(tiny_llama_path, tmp_path, caplog):
    from hf_grpo.errors import InputError
    from hf_grpo.rewards import RewardRunner

    with pytest.raises(ValueError, match="No reward source provided"):
        DistributedGRPOTrainer(tiny_llama_path, [], make_config(tmp_path), stream(rows(8)))

    class Env:
        def reset(self, **row) -> str:
            return ""

        def wait(self, seconds: int) -> str:
            """Wait.

            Args:
                seconds: how long.
            """
            return "done"

    with pytest.raises(ValueError, match="requires a `train_dataset`"):
        DistributedGRPOTrainer(
            tiny_llama_path,
            [even_token_reward],
            make_config(tmp_path, max_steps=1),
            environment_factory={"a": Env, "b": Env},
        )
    with pytest.raises(InputError, match="2 reward functions: the two lengths must match"):
        DistributedGRPOTrainer(
            tiny_llama_path,
            [even_token_reward, even_token_reward],
            make_config(tmp_path),
            stream(rows(8)),
            reward_processing_classes=[None],
        )

    def nothing(completions, **kwargs):
        return [None] * len(completions)

    RewardRunner([nothing])(["p", "q"], ["a", "b"], [[1], [2]], {"answer": ["1", "2"]})
    assert "All reward functions returned None for the following kwargs: {'prompts': \"'p'\"" in caplog.text


def test_an_iterable_eval_set_is_loaded_without_workers_and_training_keeps_them(tiny_llama_path, tmp_path):
    from datasets import Dataset

    trainer = DistributedGRPOTrainer(
        tiny_llama_path,
        [even_token_reward],
        make_config(tmp_path, dataloader_num_workers=2),
        Dataset.from_list(rows(8)),
        eval_dataset=stream(rows(3)),
    )
    assert trainer.get_train_dataloader().num_workers == 2
    assert trainer.get_eval_dataloader().num_workers == 0  # each worker would read the whole stream
    assert trainer.args.dataloader_num_workers == 2
    # A streamed train set: read in each process, not dispatched from the main one; the config keeps its values.
    streamed = DistributedGRPOTrainer(
        tiny_llama_path, [even_token_reward], make_config(tmp_path, dataloader_num_workers=2), stream(rows(8))
    )
    assert streamed.get_train_dataloader().num_workers == 0 and streamed.args.dataloader_num_workers == 2
    assert streamed.accelerator.dataloader_config.dispatch_batches is False
    assert streamed.args.accelerator_config.dispatch_batches is None
