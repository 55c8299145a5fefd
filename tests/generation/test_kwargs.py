"""TRL's generation_kwargs: mapped onto config fields, do_sample false is greedy, backend keys passed through, the
rest refused by name."""

import pytest

from hf_grpo import GRPOConfig
from hf_grpo.generation import SamplingParams
from tests.helpers.trainers import make_trainer


def config(tmp_path, backend="hf", **kwargs):
    return GRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, report_to="none", generation_backend=backend, generation_kwargs=kwargs
    )


def test_mapped_keys_set_their_fields_and_the_rest_reaches_the_sampling_params(tmp_path):
    args = config(tmp_path, top_k=7, max_new_tokens=40, stop_strings="###", min_new_tokens=3, do_sample=True)
    assert (args.top_k, args.max_completion_length, args.stop) == (7, 40, ["###"])
    sampling = SamplingParams.from_config(args)
    assert dict(sampling.extra) == {"min_new_tokens": 3} and not sampling.greedy
    assert SamplingParams.from_config(config(tmp_path, do_sample=False)).greedy


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n": 4}, "key 'n' has no equivalent here: the trainer asks for num_generations"),
        ({"num_beams": 2}, "key 'num_beams' has no equivalent here: beam search"),
        ({"do_sample": "no"}, "do_sample must be true or false"),
        ({"frequency_penalty": 0.5}, r"\['frequency_penalty'\] are not arguments of transformers.GenerationConfig"),
        ({"not_a_key": 1, "typical_p": 0.9}, r"\['not_a_key'\] are not arguments"),
    ],
)
def test_bad_keys_are_named(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        config(tmp_path, **kwargs)


@pytest.mark.slow
def test_vllm_keys_are_checked_against_vllm_sampling_params(tmp_path):
    from vllm import SamplingParams as VLLMSamplingParams

    args = config(tmp_path, backend="vllm", frequency_penalty=0.5, seed=3)
    kwargs = SamplingParams.from_config(args).vllm_kwargs(2)
    params = VLLMSamplingParams(**kwargs)  # what the colocated backend builds
    assert params.frequency_penalty == 0.5 and params.seed == 3 and params.n == 2
    with pytest.raises(ValueError, match=r"\['min_new_tokens'\] are not arguments of vllm.SamplingParams"):
        config(tmp_path, backend="vllm", min_new_tokens=3)


def test_do_sample_false_is_greedy_and_backend_keys_reach_generate(tiny_llama_path, tmp_path):
    # min_new_tokens (a GenerationConfig key) keeps EOS away until the length limit: every completion is full length.
    trainer = make_trainer(
        tiny_llama_path,
        tmp_path,
        max_steps=1,
        max_completion_length=6,
        generation_kwargs={"do_sample": False, "min_new_tokens": 6},
    )
    trainer.train()
    log = trainer.state.log_history[0]
    assert log["completions/min_length"] == 6
    assert log["frac_reward_zero_std"] == 1.0  # greedy: the G completions of a prompt are identical
    groups = {}
    for m in trainer._buffer:
        for i, row in zip(m.index.tolist(), m.input_ids.tolist()):
            groups.setdefault(i // 4, set()).add(tuple(row[-6:]))
    assert all(len(completions) == 1 for completions in groups.values())
