"""Data: prompt datasets for GRPO: loading, row checks with file:line errors, tokenisation helpers and the generated
tasks.

Every loader returns a ``datasets.Dataset`` with a ``prompt`` column (a conversation, i.e. a list of
``{"role", "content"}`` dicts, or a plain string) plus all other columns passed through for the reward
functions (math rows carry ``gt_answer`` as a string, code rows ``test_cases`` with ``inputs``/``outputs``).
See ``schema`` for the accepted row formats and how they depart from ColossalChat's loader.
"""

from .loading import load_prompt_dataset
from .prompts import encode_prompt, encode_prompts, filter_long_prompts
from .schema import DataFormatError, is_conversational
from .tasks.arithmetic import ARITHMETIC_SYSTEM_PROMPT, make_arithmetic_dataset

__all__ = [
    "ARITHMETIC_SYSTEM_PROMPT",
    "DataFormatError",
    "encode_prompt",
    "encode_prompts",
    "filter_long_prompts",
    "is_conversational",
    "load_prompt_dataset",
    "make_arithmetic_dataset",
]
