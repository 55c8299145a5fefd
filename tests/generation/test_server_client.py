"""Server-mode plumbing that needs no server: prompt spreading, request bodies, `hf-grpo serve` flags, and the
error a trainer gets for a URL where nothing answers."""

import time

import pytest

from hf_grpo.generation import SamplingParams
from hf_grpo.generation.vllm_server import VLLMServerClient, VLLMServerError, _split
from hf_grpo.serve import parse_args, serve_command


@pytest.mark.parametrize("n_items,parts,offset,expected", [
    (5, 2, 0, [(0, 3), (3, 5)]),
    (5, 2, 1, [(0, 2), (2, 5)]),      # the next rank gives the remainder to the other server
    (1, 3, 0, [(0, 1), (1, 1), (1, 1)]),
    (6, 3, 2, [(0, 2), (2, 4), (4, 6)]),
])
def test_split_covers_all_prompts_in_order(n_items, parts, offset, expected):
    assert _split(list(range(n_items)), parts, offset) == expected


def test_greedy_sampling_maps_to_temperature_zero():
    kwargs = SamplingParams(max_tokens=7, temperature=0.7, top_k=5, stop=("\n",), greedy=True).vllm_kwargs(3)
    assert kwargs["temperature"] == 0.0 and kwargs["top_k"] == 0 and kwargs["n"] == 3
    assert kwargs["logprobs"] == 0 and kwargs["stop"] == ["\n"] and kwargs["include_stop_str_in_output"]
    sampled = SamplingParams(max_tokens=7, temperature=0.7, top_p=0.9, min_p=0.1).vllm_kwargs(8)
    assert (sampled["temperature"], sampled["top_p"], sampled["min_p"], sampled["max_tokens"]) == (0.7, 0.9, 0.1, 7)


def test_serve_command_sets_what_weight_sync_needs():
    args, extra = parse_args(["--model", "/some/model", "--port", "8123", "--enforce-eager", "--max-num-seqs", "8"])
    argv, env = serve_command(args, extra)
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    joined = " ".join(argv)
    for flag in ("--model /some/model", "--port 8123", "--logprobs-mode processed_logprobs",
                 "--enable-prefix-caching", "--worker-extension-cls hf_grpo.generation.worker_extension.",
                 "--enforce-eager", "--kv-cache-memory-bytes"):
        assert flag in joined, flag
    assert argv[-2:] == ["--max-num-seqs", "8"]           # unknown flags pass through to vLLM
    nccl, _ = serve_command(parse_args(["--weight-transfer", "nccl"])[0])
    assert '{"backend": "nccl"}' in nccl


def test_unreachable_server_fails_with_its_url_within_the_timeout():
    client = VLLMServerClient("http://127.0.0.1:9", request_timeout=5, health_timeout=2)
    start = time.monotonic()
    with pytest.raises(VLLMServerError, match=r"http://127.0.0.1:9 was not healthy within 2 s.*hf-grpo serve"):
        client.wait_healthy()
    assert time.monotonic() - start < 10
