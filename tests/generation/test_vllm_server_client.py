"""Server-mode plumbing that needs no server: prompt spreading, request bodies, `hf-grpo serve` flags, and the
error a trainer gets for a URL where nothing answers."""

import os
import time

import pytest

from hf_grpo.generation import SamplingParams
from hf_grpo.generation.serve import parse_args, serve_command
from hf_grpo.generation.vllm_server import VLLMServerClient, VLLMServerError, _split


@pytest.mark.parametrize(
    "n_items,parts,offset,expected",
    [
        (5, 2, 0, [(0, 3), (3, 5)]),
        (5, 2, 1, [(0, 2), (2, 5)]),  # the next rank gives the remainder to the other server
        (1, 3, 0, [(0, 1), (1, 1), (1, 1)]),
        (6, 3, 2, [(0, 2), (2, 4), (4, 6)]),
    ],
)
def test_split_covers_all_prompts_in_order(n_items, parts, offset, expected):
    assert _split(list(range(n_items)), parts, offset) == expected


def test_greedy_sampling_maps_to_temperature_zero():
    kwargs = SamplingParams(max_tokens=7, temperature=0.7, top_k=5, stop=("\n",), greedy=True).vllm_kwargs(3)
    assert kwargs["temperature"] == 0.0 and kwargs["top_k"] == 0 and kwargs["n"] == 3
    assert kwargs["logprobs"] == 0 and kwargs["stop"] == ["\n"] and kwargs["include_stop_str_in_output"]
    sampled = SamplingParams(max_tokens=7, temperature=0.7, top_p=0.9, min_p=0.1).vllm_kwargs(8)
    assert (sampled["temperature"], sampled["top_p"], sampled["min_p"], sampled["max_tokens"]) == (0.7, 0.9, 0.1, 7)


def test_serve_command_sets_what_weight_sync_needs(tmp_path):
    args, extra = parse_args(["--model", str(tmp_path), "--port", "8123", "--enforce-eager", "--max-num-seqs", "8"])
    argv, env = serve_command(args, extra)
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    joined = " ".join(argv)
    for flag in (
        f"--model {tmp_path}",
        "--port 8123",
        "--logprobs-mode processed_logprobs",
        "--enable-prefix-caching",
        "--enable-scale-out",
        "--worker-extension-cls hf_grpo.generation.worker_extension.",
        "--enforce-eager",
        "--kv-cache-memory-bytes",
    ):
        assert flag in joined, flag
    assert argv[-2:] == ["--max-num-seqs", "8"]  # unknown flags pass through to vLLM
    nccl, _ = serve_command(parse_args(["--weight-transfer", "nccl"])[0])
    assert '{"backend": "nccl"}' in nccl
    assert "--enable-lora" not in argv and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in env
    # --lora-rank: LoRA serving and the runtime adapter route, which the adapter-only sync loads through.
    lora, lora_env = serve_command(parse_args(["--lora-rank", "16"])[0])
    assert " ".join(lora).endswith("--enable-lora --max-lora-rank 16 --max-loras 1")
    assert lora_env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1"


def test_serve_refuses_a_lora_rank_vllm_does_not_allow(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--lora-rank", "12"])
    assert (
        "--lora-rank must be one of vLLM's ranks 1, 8, 16, 32, 64, 128, 256, 320, 512, got 12"
        in capsys.readouterr().err
    )


def test_unreachable_server_fails_with_its_url_within_the_timeout():
    client = VLLMServerClient("http://127.0.0.1:9", request_timeout=5, health_timeout=2)
    start = time.monotonic()
    with pytest.raises(VLLMServerError, match=r"http://127.0.0.1:9 was not healthy within 2 s.*hf-grpo serve"):
        client.wait_healthy()
    assert time.monotonic() - start < 10


def test_trainer_address_is_the_interface_that_routes_to_the_servers():
    import socket

    from hf_grpo.generation.nccl_sync import trainer_address

    assert trainer_address(["http://127.0.0.1:8000", "http://localhost:8001"]) == "127.0.0.1"
    assert trainer_address(["http://10.1.2.3:8000"], configured="10.9.9.9") == "10.9.9.9"
    # A server on this machine's own non-loopback address: the route goes through that interface, never 127.0.1.1.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: only asks the kernel for a route, sends nothing
        except OSError:
            pytest.skip("no non-loopback IPv4 route on this machine")
        own = s.getsockname()[0]
    address = trainer_address([f"http://{own}:8000"])
    assert address == own and not address.startswith("127.")


def test_disk_sync_to_another_host_needs_a_shared_directory(tmp_path):
    from hf_grpo.generation.sync_dir import checked_sync_dir

    with pytest.raises(ValueError, match=r"servers on other hosts \(http://10.0.0.7:8000\): set vllm_weight_sync_dir"):
        checked_sync_dir(None, str(tmp_path), ["http://127.0.0.1:8000", "http://10.0.0.7:8000"], is_main=True)
    shared = tmp_path / "shared"
    assert checked_sync_dir(str(shared), str(tmp_path), ["http://10.0.0.7:8000"], is_main=True) == str(shared)
    assert shared.is_dir()
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with pytest.raises(ValueError, match="is not writable"):
        checked_sync_dir(str(blocked / "sub"), str(tmp_path), ["http://127.0.0.1:8000"], is_main=True)


# ---- hf-grpo serve: bad input fails in one line before vLLM starts ------------------------------------------------
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--port", "70000"], "--port must be 1..65535, got 70000"),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization is a fraction in (0, 1], got 1.5"),
        (["--max-model-len", "0"], "--max-model-len must be >= 1 token"),
    ],
)
def test_serve_rejects_numbers_out_of_range(flags, message, capsys):
    with pytest.raises(SystemExit) as info:
        parse_args(flags)
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_serve_names_a_model_path_that_does_not_exist(capsys):
    from hf_grpo.generation.serve import main

    assert main(["--model", "./no-such-model", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == (
        "hf-grpo serve: error: model path './no-such-model' does not exist (no folder "
        f"{os.path.abspath('no-such-model')}); pass a folder with config.json and the weights, or a hub model id (a "
        "hub model id looks like 'org/name', e.g. 'HuggingFaceTB/SmolLM2-135M-Instruct')"
    )


def test_serve_checks_the_port_and_host_before_starting():
    import socket

    from hf_grpo.generation.serve import listen_problem

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert listen_problem("127.0.0.1", port) == (
            f"cannot listen on 127.0.0.1:{port}: Address already in use; another server (an earlier hf-grpo serve?) "
            f"is using it: stop it or pick another --port"
        )
    assert listen_problem("127.0.0.1", port) is None  # free again
    assert "--host 'no-such-host.invalid' does not resolve" in listen_problem("no-such-host.invalid", port)
