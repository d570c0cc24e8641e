"""The ``math`` grader: final-answer checking with a hard per-grade budget (see ``grader.MathGrader``)."""

from graders.math.grader import MathGrader

__all__ = ["MathGrader"]
