"""The tiny-model trainer the trainer-level tests share: a RunConfig for mechanics (HF generation, CPU, two steps)
and a trainer on the generated arithmetic task with the tiny random Llama."""

from hf_grpo import DistributedGRPOTrainer, RunConfig
from hf_grpo.data import load_prompt_dataset
from tests.helpers.rewards import even_token_reward


def make_config(tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=12,
        learning_rate=1e-3,
        max_steps=2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        disable_tqdm=True,
        plot_metrics=False,
        use_cpu=True,
        generation_backend="hf",
    )  # mechanics: the vLLM backend has its own tests (tests/generation)
    values.update(overrides)
    return RunConfig(**values)


def make_trainer(tiny_llama_path, tmp_path, reward_funcs=(even_token_reward,), **overrides):
    args = make_config(tmp_path, **overrides)
    dataset = load_prompt_dataset("arithmetic:64")
    return DistributedGRPOTrainer(
        model=tiny_llama_path, reward_funcs=list(reward_funcs), args=args, train_dataset=dataset
    )


def params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
