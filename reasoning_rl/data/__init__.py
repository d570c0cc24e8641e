"""Training/eval data: sources -> validated ``Example`` rows -> prompt token ids, in a resumable order."""

from reasoning_rl.data.generators import GENERATORS, arithmetic, fixed_digit
from reasoning_rl.data.golds import BadGolds, screen_golds
from reasoning_rl.data.loading import LoadReport, load_examples
from reasoning_rl.data.prompts import Prompt, render_all, render_prompt
from reasoning_rl.data.sampler import PromptSampler
from reasoning_rl.data.schema import DataError, Example, normalize_row

__all__ = [
    "BadGolds",
    "GENERATORS",
    "DataError",
    "Example",
    "LoadReport",
    "Prompt",
    "PromptSampler",
    "arithmetic",
    "fixed_digit",
    "load_examples",
    "normalize_row",
    "render_all",
    "render_prompt",
    "screen_golds",
]
