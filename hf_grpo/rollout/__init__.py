"""Rollouts: prompts to scored groups of completions, one round at a time or ahead of training.

* `collector`: one generation round (generate, decode, score, DAPO's shaping and dynamic sampling);
* `pipeline`: asynchronous generation with bounded staleness (``max_staleness``);
* `sampler`: the prompt order, one dataloader batch per generation round.
"""

from .collector import RolloutBatch, RolloutCollector

__all__ = ["RolloutBatch", "RolloutCollector"]
