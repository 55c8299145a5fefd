"""``RewardModel``: a sequence-classification model (one logit) as a TRL-contract reward function.

Called with ``prompts`` and ``completions`` (plus any other keyword, ignored), it returns one float per completion:
the model's logit for prompt + completion, optionally normalised. Texts are built as TRL does: a conversational
prompt and its completion messages go through the *reward* tokenizer's chat template (not the policy's), plain
prompts are concatenated with their completion. Scoring is batched (``batch_size``) under ``torch.no_grad`` on
``device`` (default: the current CUDA device if there is one, else CPU).

Padding is always on the right, whatever the tokenizer's default (a policy tokenizer often pads left): every real
token then keeps its unpadded position (models with absolute position embeddings depend on that; rotary ones do not)
and classifiers that pool "the last non-pad token" by counting the attention mask find it, so a batched score equals
the score of the same text alone. The model's ``pad_token_id`` is set from the tokenizer (its EOS when it has no pad
token), without which Llama-style classifiers refuse batches.

``normalize``: None (raw logits); ``"batch"`` (z-score within each call: mean 0, std 1); ``"running"`` (z-score with
the mean/std of every score seen so far, Welford; stable across steps). Departure from TRL, which only takes raw
logits: normalising matters when mixing a reward model with 0/1 verifiable rewards by ``reward_weights``, since a
reward model's logit scale is arbitrary.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

_NORMALIZE = (None, "batch", "running")


class RewardModel:
    """Reward function object around ``AutoModelForSequenceClassification`` (a path, hub id or model object)."""

    # After a timeout the runner does not retry it once per sample: "batch" normalisation would score every lone
    # sample 0.0, "running" would count each twice, and a forward pass is no slower for one sample than another.
    split_on_timeout = False

    def __init__(
        self,
        model,
        tokenizer=None,
        *,
        batch_size: int = 16,
        max_length: int | None = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        normalize: str | None = None,
        name: str | None = None,
    ):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        if normalize not in _NORMALIZE:
            raise ValueError(f"normalize={normalize!r} is not one of {_NORMALIZE}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        source = model if isinstance(model, (str, os.PathLike)) else model.config._name_or_path
        load_from = source
        if isinstance(model, (str, os.PathLike)):
            from ..models.loading import (
                check_model_path,  # a missing path or an offline hub id: one clear ModelLoadError
            )

            load_from = check_model_path(model)
            model = AutoModelForSequenceClassification.from_pretrained(load_from, dtype=dtype)
        if model.config.num_labels != 1:
            raise ValueError(
                f"reward model {source!r} has num_labels={model.config.num_labels}; a reward model "
                f"outputs one logit per sequence (num_labels=1)"
            )
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(load_from)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.config.pad_token_id = tokenizer.pad_token_id
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
        self.model = model.to(device).eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.max_length = max_length
        self.normalize = normalize
        self.__name__ = name or os.path.basename(os.path.normpath(str(source))) or "reward_model"
        self._count, self._mean, self._m2 = 0, 0.0, 0.0  # running statistics (Welford)

    def __repr__(self) -> str:
        return f"RewardModel(name={self.__name__!r}, device={self.device}, normalize={self.normalize!r})"

    def texts(self, prompts: list, completions: list) -> list[str]:
        texts = []
        for prompt, completion in zip(prompts, completions):
            if isinstance(prompt, list):
                if not self.tokenizer.chat_template:
                    raise ValueError(
                        f"reward model {self.__name__!r}: conversational prompts need a chat template, "
                        f"and its tokenizer has none; pass a tokenizer with one (tokenizer=...)"
                    )
                messages = prompt + (
                    completion if isinstance(completion, list) else [{"role": "assistant", "content": completion}]
                )
                texts.append(self.tokenizer.apply_chat_template(messages, tokenize=False))
            else:
                texts.append(prompt + (completion if isinstance(completion, str) else completion[-1]["content"]))
        return texts

    @torch.no_grad()
    def score(self, texts: list[str]) -> list[float]:
        """Raw logits, one per text, computed ``batch_size`` texts at a time."""
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(
                texts[start : start + self.batch_size],
                return_tensors="pt",
                padding=True,
                padding_side="right",
                truncation=self.max_length is not None,
                max_length=self.max_length,
                add_special_tokens=False,
            )
            batch = {k: v.to(self.device) for k, v in batch.items()}
            logits = self.model(**batch).logits  # [B, 1]
            scores.extend(logits[:, 0].float().cpu().tolist())
        return scores

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float]:
        scores = self.score(self.texts(prompts, completions))
        if self.normalize == "batch":
            return self._standardise(scores, *self._moments(scores))
        if self.normalize == "running":
            for value in scores:
                self._count += 1
                delta = value - self._mean
                self._mean += delta / self._count
                self._m2 += delta * (value - self._mean)
            std = math.sqrt(self._m2 / self._count)
            return self._standardise(scores, self._mean, std)
        return scores

    @staticmethod
    def _moments(values: list[float]) -> tuple[float, float]:
        mean = sum(values) / len(values) if values else 0.0
        return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) if values else 0.0

    @staticmethod
    def _standardise(values: list[float], mean: float, std: float) -> list[float]:
        return [(v - mean) / (std + 1e-6) for v in values]
