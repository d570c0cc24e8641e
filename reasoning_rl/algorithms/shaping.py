"""Reward shaping on outcome rewards: DAPO's soft overlong punishment."""

from __future__ import annotations

from torch import Tensor


def overlong_penalty(lengths: Tensor, max_tokens: int, buffer: int, penalty: float) -> Tensor:
    """[N] penalty: 0 up to ``max_tokens - buffer`` response tokens, then linear up to ``penalty`` at the budget."""
    start = max_tokens - buffer
    over = (lengths.float() - start).clamp(min=0) / buffer
    return penalty * over.clamp(max=1.0)
