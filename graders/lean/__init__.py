"""Lean 4 proof grader: statement-preserving, token-guarded, sandboxed, axiom-checked."""

from graders.lean.grader import DEFAULT_AXIOMS, LeanGrader
from graders.lean.toolchain import ToolchainError

__all__ = ["DEFAULT_AXIOMS", "LeanGrader", "ToolchainError"]
