"""A generation backend that plays a tool-using policy from a script, for the agent loop's mechanics tests.

A random-init model never writes a parseable tool call, so the tests that need a given pattern of tool use (uneven
ranks, budgets, failures) script the policy: the prompt says how many tool rounds to make (``calls=N``) and,
optionally, the exact call to write (a line ``call=<text>``). Each turn counts the tool responses already in its
context and either calls again or answers. Everything else (protocol, tool execution, observation tokens, masks,
rewards, loss) is the real code.

``vary`` makes successive answers differ, so that rewards vary within a group. ``calls`` overrides the prompt's count
(the distributed tests give each rank its own). ``inner``, when given, is a real backend whose ``generate`` runs first
with the same arguments, at most ``INNER_TOKENS`` new tokens, and whose output is then replaced by the script:
under ZeRO-3 that keeps the real lock-step forward passes (collectives) of HF generate in the loop. The inner output is
thrown away, so only the number of waves each rank runs matters, not their length: a random-init model never stops
early, and decoding the whole budget left (up to 288 tokens a wave) cost a decode step per token per rank for nothing.
"""

import re
from dataclasses import replace

from hf_grpo.config import RunConfig
from hf_grpo.generation import GenerationResult, Generator, SamplingParams
from hf_grpo.generation.turns import BatchedTurns

INNER_TOKENS = 4  # new tokens the inner backend decodes per wave (see the module docstring)


def agent_args(tmp_path, **kw) -> RunConfig:
    """The loop tests' config: two rollouts per prompt on the HF backend, room for a few tool rounds."""
    base = dict(
        output_dir=str(tmp_path),
        num_generations=2,
        per_device_train_batch_size=2,
        max_completion_length=256,
        generation_backend="hf",
        report_to=[],
    )
    return RunConfig(**{**base, **kw})


def call(name, **arguments):
    """A tool call in TRL's message shape."""
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


# A few-shot tool exchange with two tools: Arrow stores the column's messages as one struct type.
EXCHANGE = [
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": "What is 23 * 41?"},
    {"role": "assistant", "content": "", "tool_calls": [call("calculator", expression="23 * 41")]},
    {"role": "tool", "name": "calculator", "content": "943"},
    {"role": "assistant", "content": "", "tool_calls": [call("search", query="Paris")]},
    {"role": "tool", "name": "search", "content": "the capital of France"},
    {"role": "assistant", "content": "943; Paris is the capital of France."},
    {"role": "user", "content": "What is 512 * 37?"},
]


def agent_trainer_config(tmp_path, **kw):
    """The trainer tests' config (`tests.helpers.trainers.make_config`): 2 prompts x 2 rollouts, 200-token budget."""
    from tests.helpers.trainers import make_config

    return make_config(
        tmp_path, **{"per_device_train_batch_size": 4, "num_generations": 2, "max_completion_length": 200, **kw}
    )


def scripted(trainer, real_backend: bool = True, **kw):
    """The scripted policy in place of the trainer's generation. ``real_backend``: over the trainer's own backend
    (`ScriptedToolUse` ``inner``, which still runs and receives every weight sync), with varied answers."""
    inner = {"vary": True, "inner": trainer.generator} if real_backend else {}
    trainer.generator = trainer.collector.generator = ScriptedToolUse(trainer.processing_class, **inner, **kw)
    return trainer


DEFAULT_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call>'


class ScriptedToolUse(Generator):
    def __init__(
        self,
        tokenizer,
        answer: str = "The answer is 42.",
        calls: int | None = None,
        inner: Generator | None = None,
        vary: bool = False,
    ):
        self.tokenizer = tokenizer
        self.answer = answer
        self.calls = calls
        self.inner = inner
        self.vary = vary

    def turn_text(self, context: str) -> str:
        wanted = self.calls if self.calls is not None else int(re.search(r"calls=(\d+)", context).group(1))
        call = re.search(r"^call=(.*)$", context, re.M)
        done = context.count("<tool_response>\n")  # one per result (the system text has none with a newline)
        if done < wanted:
            return call.group(1) if call else DEFAULT_CALL
        return self.answer

    def turns(self, lockstep_any_rank=None):
        """Waves of whole batches, as HF generate: the script answers each pending turn of a wave."""
        return BatchedTurns(self, lockstep_any_rank)

    def update_weights(self, model, version: int) -> None:
        if self.inner is not None:
            self.inner.update_weights(model, version)
        self.weight_version = version

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()

    def generate(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams, media=None) -> GenerationResult:
        if self.inner is not None:  # a vision-language policy's contexts come with their images' tensors (media)
            inner = replace(sampling, max_tokens=min(sampling.max_tokens, INNER_TOKENS))
            self.inner.generate(prompt_ids, n, inner, **({"media": media} if media is not None else {}))
        ids, finished = [], []
        for prompt in prompt_ids:
            text = self.turn_text(self.tokenizer.decode(prompt))
            for _ in range(n):
                # vary: answers differ ("...42.", "...42.!", "...42.!!", "...42.!!!", by the sample's place in the
                # call), so a group's rewards and advantages vary: a group's rollouts answer side by side in a wave.
                # Not drawn at random: with SmolLM2's tokens, 0 and 3 marks score alike under even_token_reward, and
                # so do 1 and 2, so random draws left a whole group alike one time in eight. A resumed run replays
                # the same waves, so the same answers.
                extra = len(ids) % 4 if self.vary and text == self.answer else 0
                sample = text + "!" * extra
                turn = self.tokenizer(sample, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
                ids.append(turn[: sampling.max_tokens])
                finished.append(len(turn) <= sampling.max_tokens)
        return GenerationResult(completion_ids=ids, finished=finished)
