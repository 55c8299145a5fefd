"""Generation backends behind one interface (`Generator`)."""

from .base import GenerationResult, Generator, SamplingParams
from .hf import HFGenerator

__all__ = ["GenerationResult", "Generator", "HFGenerator", "SamplingParams"]
