"""``StepTokens`` (rollout/vllm_step_tokens.py) on scripted engine-core outputs: each step's sampled tokens counted
for tracked requests only, and a tracked whole request's log-probs kept from the step outputs (vLLM's output
processor then gets none) and joined in order; a missed step is an error, not a silent misalignment."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from reasoning_rl.rollout.base import RolloutError
from reasoning_rl.rollout.vllm_step_tokens import StepTokens


@dataclass
class Out:
    """The fields of vLLM's ``EngineCoreOutput`` that StepTokens reads."""

    request_id: str
    new_token_ids: list[int]
    new_logprobs: Any = None


def lp(*values: float) -> SimpleNamespace:
    """A step's ``LogprobsLists``-like log-probs: one row per new token, the sampled token's first."""
    return SimpleNamespace(logprobs=np.array([[v, -9.0] for v in values], dtype=np.float32))


@dataclass
class Client:
    """An engine-core client whose ``get_output`` returns the scripted steps in order."""

    steps: list[list[Out]] = field(default_factory=list)

    def get_output(self) -> Any:
        return SimpleNamespace(outputs=self.steps.pop(0))


def test_counts_tracked_tokens_and_keeps_whole_requests_logprobs() -> None:
    client = Client()
    tokens = StepTokens(SimpleNamespace(engine_core=client))
    tokens.track("a", logprobs=True)
    tokens.track("b")  # counted, its log-probs left to vLLM (a request reporting every step)
    a1, b1, s1 = Out("a", [5, 6], lp(-0.5, -0.25)), Out("b", [7], lp(-1.0)), Out("stream", [9], lp(-2.0))
    a2 = Out("a", [8], lp(-0.125))
    client.steps = [[a1, b1, s1], [a2]]

    client.get_output()
    assert tokens.total == 3  # a's two and b's one; the untracked stream's not
    assert a1.new_logprobs is None  # vLLM's output processor builds no per-token objects for it
    assert b1.new_logprobs is not None and s1.new_logprobs is not None
    assert tokens.kept("a", 2) == [-0.5, -0.25]  # a park/checkpoint read mid-request
    client.get_output()
    assert tokens.total == 4
    assert tokens.kept("a", 3) == [-0.5, -0.25, -0.125]
    assert tokens.kept("b", 1) is None  # not kept here: read from vLLM's output

    with pytest.raises(RolloutError, match="3 log-probs kept for 4 sampled tokens"):
        tokens.kept("a", 4)
    tokens.forget(["a", "b"])
    assert tokens.kept("a", 0) is None
    client.steps = [[Out("a", [1], lp(-1.0))]]
    client.get_output()
    assert tokens.total == 4  # forgotten: no longer counted


def test_an_engine_without_an_in_process_core_is_refused() -> None:
    with pytest.raises(RolloutError, match="in-process engine core client"):
        StepTokens(SimpleNamespace(engine_core=None))
