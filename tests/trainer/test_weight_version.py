"""The weight version has one owner (issue 43): the engine that holds the weights. Whoever pushes weights passes
their version (``load_weights(..., version=)``: no default anywhere on the path), the engine reports it
(``engine.version``) and stamps it on every token it samples (``Delta.version`` is required); the frontier takes
the step's version from the engine and stops on one that disagrees with the trainer's count of updates, rather
than computing ``step - 1`` beside it."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import torch
from rrl_testutil import CountdownEngine, WholeEngine, scripted_frontier

from graders.runtime import GradingPool
from reasoning_rl.rollout import Delta, SamplingConfig
from reasoning_rl.trace import TraceWriter

LENGTHS = [2, 5, 3]  # prompt k's request generates LENGTHS[k] tokens, one per advance


# ---- the engine owns the version -----------------------------------------------------------------------
def test_an_engine_holds_the_version_it_was_given_and_stamps_it_on_its_completions(
    tiny_model_dir: Path,
) -> None:
    from reasoning_rl.handoff import push_weights
    from reasoning_rl.policy import Policy
    from reasoning_rl.rollout import make_engine

    engine = make_engine("hf", str(tiny_model_dir), max_model_len=64)
    assert engine.version == 0  # the weights it was built with
    greedy = SamplingConfig(temperature=0.0, max_tokens=3)
    (before,) = engine.generate([[7, 8, 9]], greedy)
    assert before.versions == [0] * len(before.token_ids)
    policy = Policy.from_pretrained(str(tiny_model_dir))
    push_weights(policy, engine, version=4)
    assert engine.version == 4
    (after,) = engine.generate([[7, 8, 9]], greedy)
    assert after.versions == [4] * len(after.token_ids)  # streamed completions carry the engine's version too


def test_no_default_version_hides_on_the_weight_path() -> None:
    """Every function that puts weights into an engine takes ``version`` with no default: a caller that forgets
    it is a TypeError, never a silent version 0."""
    from reasoning_rl.distributed.broadcast import receive_weights
    from reasoning_rl.distributed.views import GroupEngine
    from reasoning_rl.distributed.worker import ModelWorker
    from reasoning_rl.handoff import load_all, push_weights
    from reasoning_rl.rollout.adapters import AdapterEngine
    from reasoning_rl.rollout.base import RolloutEngine
    from reasoning_rl.rollout.hf_engine import HFEngine
    from reasoning_rl.trainer.build import Components

    fns: list[Callable[..., Any]] = [
        RolloutEngine.load_weights,
        AdapterEngine.load_adapter,
        HFEngine.load_weights,
        HFEngine.load_adapter,
        GroupEngine.load_weights,
        load_all,
        push_weights,
        receive_weights,
        ModelWorker.push_weights,
        Components.push_weights,
        Components.engine_ready,
    ]
    for fn in fns:
        param = inspect.signature(fn).parameters["version"]
        assert param.default is inspect.Parameter.empty, fn.__qualname__


def test_a_delta_without_a_version_cannot_be_made() -> None:
    with pytest.raises(TypeError, match="version"):
        Delta("r", [5], [-1.0], "", False, "")  # type: ignore[call-arg]
    assert Delta("r", [5], [-1.0], "", False, "", version=2).version == 2


def test_ranks_that_disagree_on_the_version_are_an_error() -> None:
    from reasoning_rl.distributed.rank import one_version

    assert one_version([3, 3]) == 3
    with pytest.raises(RuntimeError, match=r"different policy versions \[3, 2\]"):
        one_version([3, 2])


# ---- the frontier takes it from the engine ---------------------------------------------------------------
def test_the_frontier_stops_on_an_engine_at_another_version(tmp_path: Path) -> None:
    """Step 3 follows 2 updates: an engine at version 5 is a misnumbered hand-off, a one-line error naming both
    (before: the frontier computed ``step - 1`` and recorded it whatever the engine held)."""
    none = cast(Any, None)
    frontier = scripted_frontier(SimpleNamespace(version=5), none, [[n] for n in LENGTHS])
    trace = TraceWriter(tmp_path / "trace.jsonl")
    with pytest.raises(RuntimeError) as err:
        frontier.next_batch(3, trace)
    trace.close()
    message = str(err.value)
    assert "\n" not in message
    assert "step 3: the engine holds policy version 5, the trainer is at 2" in message


@pytest.mark.parametrize("engine_class", [CountdownEngine, WholeEngine])
def test_per_token_versions_and_lags_come_from_the_engine(tmp_path: Path, engine_class: type) -> None:
    """A sample that crosses a hand-off carries the version the engine recorded for each of its tokens (its
    first two from version 0, the rest from version 1), whether the engine reported them step by step or once
    at the end (issue 44); the lag metrics of the step that trains it follow."""
    engine = engine_class()
    trace = TraceWriter(tmp_path / "trace.jsonl")
    with GradingPool(workers=1) as pool:
        frontier = scripted_frontier(engine, pool, [[n] for n in LENGTHS], running_groups=2)
        # step 1 admits prompts 0 and 1 (two slots): prompt 0 finishes after 2 advances and is trained
        first, first_flow = frontier.next_batch(1, trace)
        engine.load_weights(torch.zeros(0), version=1)  # step 1's update, handed off
        # step 2 trains prompt 1: 2 tokens sampled at version 0, its 3 others after the hand-off
        second, second_flow = frontier.next_batch(2, trace)
    trace.close()
    assert [s.completion.versions for s in first] == [[0, 0]]
    assert [s.completion.versions for s in second] == [[0, 0, 1, 1, 1]]
    assert first_flow["staleness/lag_max"] == 0.0
    # trained at version 1: two tokens lag 1, three lag 0
    assert second_flow["staleness/lag_mean"] == pytest.approx(2 / 5)
    assert second_flow["staleness/lag_max"] == 1.0
    assert second_flow["staleness/span_max"] == 1.0


@pytest.mark.parametrize("resident", [True, False])
def test_a_checkpoint_and_a_park_read_unfinished_samples_from_the_engine(
    tmp_path: Path, resident: bool
) -> None:
    """Requests that report only at their end (issue 44): the checkpoint's partial samples and a park's are read
    from the engine (``partial``), tokens and versions; a checkpoint leaves the request resident, a park stops it
    and the resubmitted sample ends with its parked tokens first."""
    engine = WholeEngine()
    trace = TraceWriter(tmp_path / "trace.jsonl")
    with GradingPool(workers=1) as pool:
        frontier = scripted_frontier(engine, pool, [[n] for n in LENGTHS], running_groups=2)
        frontier.resident = resident
        frontier.next_batch(1, trace)  # prompt 1 (5 tokens) has 2 when prompt 0 finishes
        (partial,) = frontier.state()["partial"]
        assert (partial["token_ids"], partial["versions"]) == ([7, 7], [0, 0])
        frontier.park()
        assert len(engine.left) == (1 if resident else 0)
        assert [len(p.token_ids) for p in frontier.waiting] == ([] if resident else [2])
        engine.load_weights(torch.zeros(0), version=1)
        (second,), _ = frontier.next_batch(2, trace)
    trace.close()
    # resident: 3 more tokens at version 1; parked: resubmitted with prompt + 2 tokens, so its countdown (the
    # prompt's first id, 5) runs 5 more steps at version 1 after the 2 parked tokens
    assert second.completion.versions == ([0, 0, 1, 1, 1] if resident else [0, 0] + [1] * 5)
