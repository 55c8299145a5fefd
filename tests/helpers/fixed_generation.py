"""A generation backend whose completions depend only on the prompt, for the invariance tests.

The property those tests check is "one global batch gives the same update however it is split over processes,
accumulation steps and backends". Sampling from the policy differs with the layout (each process draws from its own
random stream), so the batch is fixed instead: each prompt's ``n`` completions are drawn from a generator seeded by
the prompt's token ids, with random lengths (some ending in EOS). Everything downstream (rewards, advantages, loss,
backward, optimizer, DeepSpeed/FSDP2) is the real code.
"""

import hashlib
import random

from hf_grpo.generation import GenerationResult, Generator, SamplingParams


class FixedCompletions(Generator):
    def __init__(self, vocab_size: int, eos_token_id: int):
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id

    def generate(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> GenerationResult:
        completions, finished = [], []
        for prompt in prompt_ids:
            rng = random.Random(hashlib.sha256(str(prompt).encode()).hexdigest())
            for _ in range(n):
                length = rng.randint(2, sampling.max_tokens)
                ids = [rng.randrange(3, self.vocab_size) for _ in range(length)]
                done = length < sampling.max_tokens
                if done:
                    ids[-1] = self.eos_token_id
                completions.append(ids)
                finished.append(done)
        return GenerationResult(completion_ids=completions, finished=finished)
