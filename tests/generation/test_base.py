"""The backend-neutral sampling settings: one mapping onto transformers' arguments for both transformers backends."""

import warnings

from transformers import GenerationConfig

from hf_grpo.generation import SamplingParams


def test_transformers_kwargs_pass_every_knob_and_unset_them_when_greedy():
    sampling = SamplingParams(max_tokens=8, temperature=0.7, top_p=0.9, top_k=0, min_p=0.0, repetition_penalty=1.2)
    assert sampling.transformers_kwargs() == dict(
        do_sample=True, temperature=0.7, top_p=0.9, top_k=None, min_p=None, repetition_penalty=1.2
    )  # 0 means off for top_k and min_p: transformers' off is None
    greedy = SamplingParams(max_tokens=8, temperature=0.7, top_k=5, greedy=True)
    assert greedy.transformers_kwargs() == dict(do_sample=False, temperature=None, top_p=None, top_k=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # transformers warns on sampling knobs set beside do_sample=False
        for kwargs in (sampling.transformers_kwargs(), greedy.transformers_kwargs()):
            GenerationConfig(max_new_tokens=8, **kwargs).validate(strict=True)


def test_every_backend_is_built_by_the_shared_constructor():
    """build_generator builds each backend through `Generator.from_config` (one signature for all); a backend that
    did not define it would refuse there, naming itself."""
    from types import SimpleNamespace

    from hf_grpo.generation import Generator, backend_class

    choices = [("hf", None), ("hf_continuous", None), ("vllm", "colocate"), ("vllm", "server")]
    classes = {backend_class(SimpleNamespace(generation_backend=b, vllm_mode=m)) for b, m in choices}
    assert {c.__name__ for c in classes} == {
        "HFGenerator",
        "ContinuousBatchingGenerator",
        "VLLMColocateGenerator",
        "VLLMServerGenerator",
    }
    for cls in classes:  # its own, not one inherited (continuous batching subclasses HF generate)
        assert "from_config" in vars(cls), f"{cls.__name__} has no from_config of its own"
        assert issubclass(cls, Generator)


def test_span_versions_label_every_token_and_fall_back_where_the_engine_had_no_version():
    from types import SimpleNamespace

    from hf_grpo.generation.base import span_versions

    spans = [{"version": "3", "start": 0, "end": 2}, {"version": "4", "start": 2, "end": 5}]
    assert span_versions(spans, 5, -1) == [3, 3, 4, 4, 4]
    objects = [SimpleNamespace(version="7", start=0, end=1), SimpleNamespace(version="8", start=1, end=3)]
    assert span_versions(objects, 3, -1) == [7, 8, 8]
    # Before the first sync vLLM labels tokens "default"; a server that never labelled them returns no spans.
    assert span_versions([{"version": "default", "start": 0, "end": 2}], 2, 0) == [0, 0]
    assert span_versions(None, 3, 5) == [5, 5, 5]
