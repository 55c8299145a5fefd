"""Server mode against two real `vllm serve` processes on loopback, started here with `hf-grpo serve`: prompts are
spread over both, a weight sync reaches both, a killed server is reported by URL, and a restarted one is brought up
to the trainer's current weights before it is used. Ends with 2-process training in server mode: one `accelerate
launch` per layout (the DDP one carrying the synchronous, asynchronous and QLoRA runs) and one 2-node launch pair
carrying both server fleets (tests/scripts/train_worker.py's ``runs``)."""

import copy
import logging
import os
import re
import time

import pytest
import torch
from accelerate import Accelerator

from hf_grpo import RunConfig
from hf_grpo.generation import SamplingParams
from hf_grpo.generation.adapter_sync import ADAPTER_NAME
from hf_grpo.generation.vllm_server import VLLMServerError, VLLMServerGenerator
from hf_grpo.models import load_model
from tests.helpers.launch import launch_runs, step_logs
from tests.helpers.multinode import start_nodes, wait_all
from tests.helpers.scoring import trainer_logprobs
from tests.helpers.servers import Server, running

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]
LORA_SERVED = 8  # the servers' --lora-rank


@pytest.fixture(scope="module")
def servers(vllm_tiny_path, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("server-logs")
    # Both serve LoRA adapters up to rank 8 (`hf-grpo serve --lora-rank 8`): LoRA/QLoRA trainers sync the adapter alone.
    with running(*(Server(vllm_tiny_path, log_dir, lora_rank=LORA_SERVED) for _ in range(2))) as pair:
        yield list(pair)


def setup_args(servers, output_dir, **overrides) -> RunConfig:
    return RunConfig(
        output_dir=str(output_dir),
        generation_backend="vllm",
        vllm_mode="server",
        vllm_server_urls=[s.url for s in servers],
        vllm_server_timeout=5,
        vllm_request_timeout=60,
        use_cpu=True,
        report_to="none",
        **overrides,
    )


@pytest.fixture(scope="module")
def setup(servers, vllm_tiny_path, tmp_path_factory):
    args = setup_args(servers, tmp_path_factory.mktemp("server-mode"))
    generator = VLLMServerGenerator(args, Accelerator(cpu=True))
    model = load_model(vllm_tiny_path).eval()
    yield generator, model
    generator.close()
    # The default transfer directory is RAM (/dev/shm) holding a whole policy: it goes with the generator.
    assert generator.sync_dir.startswith("/dev/shm/") and not os.path.exists(generator.sync_dir)


PROMPTS = [[1, 200 + i, 300 + i, 400 + i] for i in range(5)]


def test_prompts_are_spread_over_both_servers_and_returned_in_order(servers, setup):
    generator, _ = setup
    served = [s.requests_served() for s in servers]
    greedy = SamplingParams(max_tokens=6, greedy=True)
    result = generator.generate(PROMPTS, 2, greedy)
    assert len(result.completion_ids) == 10 and all(
        len(lp) == len(c) for lp, c in zip(result.logprobs, result.completion_ids)
    )
    assert all(s.requests_served() > before for s, before in zip(servers, served)), "a server got no prompts"
    # Order: each prompt's group equals what that prompt alone produces.
    for i, prompt in enumerate(PROMPTS):
        alone = generator.generate([prompt], 2, greedy).completion_ids
        assert result.completion_ids[2 * i : 2 * i + 2] == alone


def test_regex_constrains_completions_from_both_servers(servers, setup, tokenizer):
    """TRL's vllm_structured_outputs_regex in server mode: sent as ``structured_outputs: {regex}`` in the request."""
    generator, _ = setup
    result = generator.generate(PROMPTS[:4], 3, SamplingParams(max_tokens=8, regex="[0-9]{3}"))
    texts = [tokenizer.decode(c, skip_special_tokens=True) for c in result.completion_ids]
    assert len(texts) == 12 and all(re.fullmatch("[0-9]{3}", t) for t in texts), texts


def test_weight_sync_reaches_every_server(servers, setup):
    generator, model = setup
    prompt, completion = PROMPTS[0], [500, 600, 700, 800]
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    expected = trainer_logprobs(model, prompt, completion)
    assert (servers[0].completion_logprobs(prompt, completion) - expected).abs().max() > 0.01
    generator.update_weights(model, version=3)
    for s in servers:
        assert s.weight_version() == "3"
        torch.testing.assert_close(s.completion_logprobs(prompt, completion), expected, atol=1e-3, rtol=0)


def test_updates_land_in_flight_and_each_token_keeps_the_version_that_sampled_it(servers, setup):
    """Partial rollouts on the servers (``recompute``): weight updates keep coming while requests decode on both
    servers. Each update pauses them (vLLM's ``/pause?mode=keep``), reloads, preempts them so that their prefix is
    recomputed, and resumes them; every token is labelled by its server with the version that sampled it, and its
    sampling log-prob is the trainer's under that version's weights (a completion spans several)."""
    generator, model = setup
    generator.partial = "recompute"  # set from partial_rollouts when a trainer builds the generator
    for c in generator.clients:
        c.partial = "recompute"
    sampling = SamplingParams(max_tokens=300, extra=(("ignore_eos", True),))
    states, done, version = {}, [], 4
    turns = generator.turns()
    torch.manual_seed(2)
    try:
        generator.update_weights(model, version)
        states[version] = {k: v.clone() for k, v in model.state_dict().items()}
        for key in range(4):  # two on each server
            turns.submit(key, PROMPTS[key], sampling)
        while turns.busy():
            done += turns.poll(0.3)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.05)
            version += 1
            generator.update_weights(model, version)
            states[version] = {k: v.clone() for k, v in model.state_dict().items()}
    finally:
        generator.partial = None
        for c in generator.clients:
            c.partial = None
    assert len(done) == 4 and any(len(set(t.versions)) > 1 for t in done), [sorted(set(t.versions)) for t in done]
    for turn in done:
        assert len(turn.versions) == len(turn.logprobs) == 300 and turn.versions == sorted(turn.versions)
        for v in sorted(set(turn.versions)):
            model.load_state_dict(states[v])
            own = torch.tensor([x == v for x in turn.versions])
            diff = (torch.tensor(turn.logprobs) - trainer_logprobs(model, PROMPTS[turn.key], turn.token_ids)).abs()
            assert diff[own].max() < 1e-3, (v, float(diff[own].max()))  # each segment: its own version's
            if (~own).any():
                assert diff[~own].max() > 0.01, v  # and not another version's


def lora_policy(model, rank: int):
    """``model`` under a LoRA adapter whose B matrices are random (a fresh adapter is the identity)."""
    from peft import LoraConfig, get_peft_model

    policy = get_peft_model(copy.deepcopy(model), LoraConfig(r=rank, target_modules="all-linear", lora_dropout=0.0))
    torch.manual_seed(rank)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    return policy.eval()


def test_killed_server_is_named_and_a_restarted_one_gets_the_current_weights(servers, setup, tmp_path, caplog):
    """The restarted server serves a LoRA policy: it gets the base (the one file of the first sync), then the current
    adapter, before it is used."""
    _, model = setup
    policy = lora_policy(model, rank=4)
    generator = VLLMServerGenerator.from_config(
        setup_args(servers, tmp_path / "lora"), Accelerator(cpu=True), policy, None, ""
    )
    assert generator.lora_rank == LORA_SERVED  # vLLM rounds rank 4 up to its next max_lora_rank
    urls = ", ".join(s.url for s in servers)
    sync = f"the LoRA adapter (engine max_lora_rank {LORA_SERVED}) by disk"
    assert generator.describe() == f"vLLM servers {urls}; weight sync: {sync}"
    generator.update_weights(policy, version=3)
    base_file = os.path.join(generator.sync_dir, "model.safetensors")
    written = os.stat(base_file).st_mtime_ns
    with torch.no_grad():
        next(p for n, p in policy.named_parameters() if "lora_B" in n).add_(0.1)
    generator.update_weights(policy, version=4)
    assert os.stat(base_file).st_mtime_ns == written, "the base was sent again: the adapter sync sends it once"
    victim = servers[1]
    victim.kill()
    start = time.monotonic()
    with pytest.raises(VLLMServerError, match=re.escape(victim.url) + ".*Restart it"):
        generator.generate(PROMPTS, 2, SamplingParams(max_tokens=4))
    assert time.monotonic() - start < 60, "reporting a dead server took too long"
    # vllm_server_on_failure=reroute: the dead server's share goes to the other one, which serves every prompt.
    args = setup_args(servers, tmp_path, vllm_server_on_failure="reroute")  # its own weights directory
    rerouting = VLLMServerGenerator(args, Accelerator(cpu=True))
    rerouting.update_weights(model, version=4)  # reaches the live server; the dead one leaves the rotation
    assert rerouting.down == {victim.url}
    served = servers[0].requests_served()
    result = rerouting.generate(PROMPTS, 2, SamplingParams(max_tokens=4))
    assert len(result.completion_ids) == 10 and servers[0].requests_served() == served + 10  # vLLM counts sequences
    victim.start()
    victim.wait()
    assert victim.weight_version() != "4"  # a fresh server holds the checkpoint's weights
    result = generator.generate(PROMPTS, 2, SamplingParams(max_tokens=4))
    assert len(result.completion_ids) == 10
    assert victim.weight_version() == "4"
    # The rerouting generator takes the restarted server back (it already holds version 4) and uses both again.
    served = [s.requests_served() for s in servers]
    assert len(rerouting.generate(PROMPTS, 2, SamplingParams(max_tokens=4)).completion_ids) == 10
    now = [s.requests_served() - n for s, n in zip(servers, served)]
    assert rerouting.down == set() and sorted(now) == [4, 6], now  # 5 prompts x 2 split 3 / 2
    rerouting.close()
    prompt, completion = PROMPTS[1], [510, 610, 710]
    torch.testing.assert_close(
        victim.completion_logprobs(prompt, completion), trainer_logprobs(model, prompt, completion), atol=1e-3, rtol=0
    )
    # ... and the adapter of version 4, with which every request of the LoRA generator was served.
    served = victim.completion_logprobs(prompt, completion, model=ADAPTER_NAME)
    assert (served - trainer_logprobs(model, prompt, completion)).abs().max() > 0.01, "the adapter changes nothing"
    torch.testing.assert_close(served, trainer_logprobs(policy, prompt, completion), atol=1e-3, rtol=0)
    generator.close()

    # An adapter above the servers' rank keeps the merged sync, and says which server and which flag.
    with caplog.at_level(logging.WARNING, logger="hf_grpo.generation.vllm_server"):
        wide = lora_policy(model, rank=16)
        merged = VLLMServerGenerator.from_config(
            setup_args(servers, tmp_path / "wide"), Accelerator(cpu=True), wide, None, ""
        )
    assert merged.lora_rank is None
    assert f"serves LoRA ranks up to {LORA_SERVED}; start it with `hf-grpo serve --lora-rank 16`" in caplog.text
    merged.close()


def server_config(servers, **overrides) -> dict:
    """GRPOConfig overrides for server mode against ``servers`` (a train_worker run's ``config``)."""
    config = {"generation_backend": "vllm", "vllm_mode": "server", "max_prompt_length": 256}
    return {**config, "vllm_server_urls": [s.url for s in servers], **overrides}


def launched(servers, backend, model_path, out, runs: dict[str, dict], **launch_options) -> dict:
    """One launch of ``runs`` against ``servers``, and the weight version each server holds right after it (the
    module's later launches change it)."""
    _, by_name = launch_runs(backend, model_path, out, runs, **launch_options)
    return {"runs": by_name, "versions": [s.weight_version() for s in servers]}


# One case per distinct path of the server-mode sync. The weights go out through the same iterator as in colocate mode
# (hf_grpo.generation.weights), which takes ZeRO-3's gather one tensor at a time and every other layout's parameters
# as they are, and rank 0 pushes them to the servers whatever the layout: ddp covers the push and the plain path, zero3
# the gather under server mode. zero2 holds whole parameters on every rank, so its sync is the ddp case's path (its
# DeepSpeed wrapping and bf16 are trained with a sync in tests/distributed/test_backends.py's zero2 launch, and with
# the servers here in the zero3 case's bf16). fsdp2: accelerate applies an FSDP config only on GPUs, so on this CPU
# `fsdp2.yaml` trains on the DDP path; test_backends keeps the fsdp2 launch that proves the config runs.
SERVER_BACKENDS = ("ddp", "zero3")
QLORA = dict(use_peft=True, lora_r=4, lora_dropout=0.0, load_in_4bit=True, bnb_4bit_compute_dtype="float32")


@pytest.fixture(scope="module")
def ddp(servers, vllm_tiny_path, tmp_path_factory):
    """One DDP launch carrying the layout's server-mode runs; the synchronous one last, so that the versions the servers
    hold after the launch are its."""
    runs = {
        "qlora": {"config": server_config(servers, learning_rate=2e-2, **QLORA)},
        # Three steps are the fewest where the bound binds: round 2 is the first that may start only after an update.
        "async": {"config": server_config(servers, max_staleness=1, max_steps=3)},
        # Partial rollouts: every update pauses the servers' requests in flight (keep) instead of waiting for them.
        "partial": {
            "config": server_config(
                servers,
                max_staleness=1,
                max_steps=3,
                partial_rollouts="keep",
                max_completion_length=128,
                generation_kwargs={"ignore_eos": True},
            )
        },
        "sync": {"config": server_config(servers)},
    }
    return launched(servers, "ddp", vllm_tiny_path, tmp_path_factory.mktemp("ddp"), runs, timeout=900)


@pytest.mark.parametrize("backend", SERVER_BACKENDS)
def test_two_process_training_in_server_mode(backend, servers, vllm_tiny_path, tmp_path, request):
    """Every accelerate config (bf16 mixed precision for the DeepSpeed ones; fsdp2: see `SERVER_BACKENDS`) trains
    against the two servers: the weights they receive after each step are the trainer's (ZeRO-3 gathers them one
    tensor at a time)."""
    if backend == "ddp":
        result = request.getfixturevalue("ddp")
    else:
        result = launched(servers, backend, vllm_tiny_path, tmp_path, {"sync": {"config": server_config(servers)}})
    r0, r1 = result["runs"]["sync"].ranks
    assert all(torch.equal(w, r1["weights"][n]) for n, w in r0["weights"].items())
    before = {n: p.detach() for n, p in load_model(vllm_tiny_path).named_parameters()}
    assert any(not torch.equal(before[n], w) for n, w in r0["weights"].items())
    logs = step_logs(r0)
    assert [r["weight_version"] for r in logs] == [0.0, 1.0]
    tolerance = 1e-3 if backend == "ddp" else 0.02  # bf16 compute in the trainer, bf16 weights sent
    assert all(r["sampling/logp_difference/mean"] < tolerance for r in logs)  # servers held the trainer's weights
    assert result["versions"] == ["1", "1"]  # the last step's sync reached both servers


def test_two_process_asynchronous_training_in_server_mode(ddp):
    """max_staleness 1 against the servers, 2 processes: the producers' generate calls and the trainer's weight pushes
    (collective on the trainer's thread) interleave without a hang; rounds are at most one update old and the
    replicas stay identical."""
    r0, r1 = ddp["runs"]["async"].ranks
    assert all(torch.equal(w, r1["weights"][n]) for n, w in r0["weights"].items())
    for logs in (step_logs(r0), step_logs(r1)):
        behind = [r["async/staleness"] for r in logs]
        assert len(behind) == 3 and all(0 <= b <= 1 for b in behind), behind
        assert [step - r["weight_version"] for step, r in enumerate(logs)] == behind


def test_two_process_partial_rollouts_in_server_mode(ddp):
    """Partial rollouts against the servers, 2 processes: the main process pauses both servers for every update while
    both processes' requests are in flight, and the replicas stay identical. Every token is labelled by the server
    that sampled it, and each step's oldest token is at most one update behind it."""
    r0, r1 = ddp["runs"]["partial"].ranks
    assert all(torch.equal(w, r1["weights"][n]) for n, w in r0["weights"].items())
    for logs in (step_logs(r0), step_logs(r1)):
        behind = [r["async/staleness"] for r in logs]
        assert len(behind) == 3 and all(0 <= b <= 1 for b in behind), behind
        assert all(0 <= r["async/version_spread"] <= 1 for r in logs), logs


def test_two_process_qlora_training_in_server_mode(ddp):
    """A 4-bit base under a LoRA adapter, 2 processes (DDP): the servers (which loaded the dense checkpoint, and serve
    LoRA up to rank 8) receive the dequantized base once, then the adapter alone after each step, and every request
    names it, so they sample from the policy the trainer scores."""
    r0, r1 = ddp["runs"]["qlora"].ranks
    assert all(torch.equal(w, r1["weights"][n]) for n, w in r0["weights"].items())
    logs = step_logs(r0)
    assert [r["weight_version"] for r in logs] == [0.0, 1.0]
    # Without the sync the servers would sample from other weights (the dense checkpoint a server starts with, or
    # another run's): 4-bit rounding alone moves log-probs far more. Each process splits its prompts over both servers,
    # so both sampled both steps. (That the last step's sync reaches both servers is checked after the launch's last
    # run, `test_two_process_training_in_server_mode[ddp]`: the same sync.)
    assert all(r["sampling/logp_difference/max"] < 1e-3 for r in logs), [
        r["sampling/logp_difference/max"] for r in logs
    ]


def test_two_nodes_share_the_servers_equally_and_every_server_gets_the_weights(servers, vllm_tiny_path, tmp_path):
    """2 nodes x 1 process on loopback (the planner's commands, tests/helpers/multinode.py) against the servers, named
    with TRL's vllm_server_base_url as a list: every process splits each round over every server, so each server
    answers the same number of requests, and each one ends holding the last step's weights. One launch pair, two runs:
    one shared server, then a server per node (last, so the versions the servers hold after it are its)."""
    runs = []
    for fleet in (servers[:1], servers):  # one shared server; a server per node
        config = server_config(fleet, max_steps=2)
        config["vllm_server_base_url"] = config.pop("vllm_server_urls")
        runs.append({"config": config})
    spec = {"runs": runs}
    before = [s.requests_served() for s in servers]
    folders = [tmp_path, tmp_path]
    wait_all(start_nodes("ddp", vllm_tiny_path, spec, folders), folders)
    for k in range(len(runs)):
        r0, r1 = (torch.load(tmp_path / "out" / f"rank{r}_{k}.pt", weights_only=False) for r in (0, 1))
        assert r0["world"] == 2 and all(torch.equal(w, r1["weights"][n]) for n, w in r0["weights"].items())
        assert all(r["sampling/logp_difference/mean"] < 1e-3 for r in step_logs(r0))
    served = [s.requests_served() - b for s, b in zip(servers, before)]
    # vLLM counts sequences: 2 processes x 2 rounds x 2 prompts x 4 completions = 32 a run, split evenly over its
    # fleet: the shared server's 32, then 16 each; the counters add up over the two runs.
    assert served == [32 + 16, 16], served
    assert all(s.weight_version() == "1" for s in servers)  # synced after step 1 (the last step's round)
