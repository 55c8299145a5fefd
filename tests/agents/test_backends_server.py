"""Multi-turn rollouts against a real `vllm serve` (`hf-grpo serve`, the embedded model, loopback): every turn is
one request, and the training row is exactly what the server sampled from.

The check: the server's own log-probs of the finished row (prompt + ledger, scored in one pass with
``prompt_logprobs``) equal the log-probs it returned while sampling, on every token the policy sampled. A sampled turn
whose tokens were re-tokenized, or an observation that differs from the tokens the server was sent, would put the
later turns in another context and break the equality; observation tokens themselves are recorded with log-prob 0.0
and mask 0, and the server gives them clearly non-zero log-probs, so including one would break it too.

The embedded model calls the calculator in about one rollout of five at temperature 1; a seeded request (vLLM's
``seed``, through generation_kwargs) makes the sample fixed, and with seed 0 each of these four prompts' rollouts calls
it and samples a later turn after the observation. With a seed every rollout of a prompt is the same sample (each turn
is its own request), so one rollout per prompt."""

import pytest
import torch
from accelerate import Accelerator

from hf_grpo import GRPOConfig
from hf_grpo.agents import AgentRollouts, calculator
from hf_grpo.data import load_prompt_dataset
from hf_grpo.generation import SamplingParams
from hf_grpo.generation.vllm_server import VLLMServerGenerator
from tests.helpers.servers import Server, running

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def test_server_multi_turn_rows_are_what_the_server_sampled(smol_path, tokenizer, tmp_path):
    with running(Server(smol_path, tmp_path)) as (server,):
        args = GRPOConfig(
            output_dir=str(tmp_path / "out"),
            generation_backend="vllm",
            vllm_mode="server",
            vllm_server_urls=[server.url],
            vllm_server_timeout=30,
            use_cpu=True,
            report_to="none",
            num_generations=4,
            per_device_train_batch_size=8,
            max_completion_length=96,
            max_tool_calling_iterations=2,
        )
        generator = VLLMServerGenerator(args, Accelerator(cpu=True))
        agent = AgentRollouts(tokenizer, args, [calculator])
        rows = load_prompt_dataset("multiplication:4").to_list()
        sampling = SamplingParams(max_tokens=96, temperature=1.0, extra=(("seed", 0),))
        result = agent.generate(generator, rows, 1, sampling, round_key=0, process=0)
        agent.close()
        generator.close()
        multi = [i for i, m in enumerate(result.completion_mask) if 0 in m]
        assert multi, "no rollout called the tool"
        assert result.metrics["tools/calculator/calls"] > 0
        for i in multi[:4]:
            prompt, ids, mask = result.prompt_ids[i], result.completion_ids[i], result.completion_mask[i]
            scored = server.completion_logprobs(prompt, ids)  # [C] in one pass
            sampled = torch.tensor(result.logprobs[i])  # [C], 0.0 on observations
            policy = torch.tensor(mask, dtype=torch.bool)
            torch.testing.assert_close(sampled[policy], scored[policy], atol=1e-3, rtol=0)
            assert (sampled[~policy] == 0).all() and (scored[~policy] - sampled[~policy]).abs().max() > 1e-2
