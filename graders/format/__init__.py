"""``format``: is the final answer written the way the prompt asked (``\\boxed{}`` or ``#### N``)?"""

from graders.format.grader import STYLES, FormatGrader

__all__ = ["STYLES", "FormatGrader"]
