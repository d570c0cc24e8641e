"""Rollout engines: vLLM (colocated, in-process) and a plain-transformers fallback."""

from reasoning_rl.rollout.base import (
    ENGINES,
    Completion,
    ContinuousEngine,
    Delta,
    DraftCounts,
    Request,
    RolloutEngine,
    RolloutError,
    SamplingConfig,
    make_engine,
    register_engine,
)

__all__ = [
    "ENGINES",
    "Completion",
    "ContinuousEngine",
    "Delta",
    "DraftCounts",
    "Request",
    "RolloutEngine",
    "RolloutError",
    "SamplingConfig",
    "make_engine",
    "register_engine",
]
