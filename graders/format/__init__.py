"""Shaping graders for composed rewards: ``format`` (the answer in ``\\boxed{}`` / ``#### N``) and ``length``."""

from graders.format.grader import STYLES, FormatGrader
from graders.format.length import LengthGrader

__all__ = ["STYLES", "FormatGrader", "LengthGrader"]
