"""A generation backend that plays a tool-using policy from a script, for the agent loop's mechanics tests.

A random-init model never writes a parseable tool call, so the tests that need a given pattern of tool use (uneven
ranks, budgets, failures) script the policy: the prompt says how many tool rounds to make (``calls=N``) and,
optionally, the exact call to write (a line ``call=<text>``). Each turn counts the tool responses already in its
context and either calls again or answers. Everything else (protocol, tool execution, observation tokens, masks,
rewards, loss) is the real code.
"""

import re

from hf_grpo.generation import GenerationResult, Generator, SamplingParams

DEFAULT_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6 * 7"}}</tool_call>'


class ScriptedToolUse(Generator):
    def __init__(self, tokenizer, answer: str = "The answer is 42."):
        self.tokenizer = tokenizer
        self.answer = answer

    def turn_text(self, context: str) -> str:
        wanted = int(re.search(r"calls=(\d+)", context).group(1))
        call = re.search(r"^call=(.*)$", context, re.M)
        done = context.count("<tool_response>\n")      # one per result (the system text has none with a newline)
        if done < wanted:
            return call.group(1) if call else DEFAULT_CALL
        return self.answer

    def generate(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> GenerationResult:
        ids, finished = [], []
        for prompt in prompt_ids:
            turn = self.tokenizer(self.turn_text(self.tokenizer.decode(prompt)), add_special_tokens=False)["input_ids"]
            turn = turn + [self.tokenizer.eos_token_id]
            for _ in range(n):
                ids.append(turn[:sampling.max_tokens])
                finished.append(len(turn) <= sampling.max_tokens)
        return GenerationResult(completion_ids=ids, finished=finished)
