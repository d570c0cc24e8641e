"""The admission / selection rules of continuous rollouts (trainer/staleness.py): the staleness bound holds for
every trained group, every step trains exactly B groups, nothing is discarded, and max_lag=0 is the sync step."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from reasoning_rl.trainer.staleness import StalenessSchedule


def simulate(
    batch: int, max_lag: int, steps: int, seed: int, lengths: dict[int, int] | None = None
) -> list[tuple[int, int, int]]:
    """Groups with random generation lengths (recorded in ``lengths``); (step version, ticket, lag) of every
    trained group."""
    rng = random.Random(seed)
    sched = StalenessSchedule(batch, max_lag)
    lengths = {} if lengths is None else lengths
    remaining: dict[int, int] = {}  # ticket -> engine steps left
    trained: list[tuple[int, int, int]] = []
    for version in range(steps):
        while sched.room():
            ticket = sched.admit(version)
            remaining[ticket] = lengths[ticket] = rng.choice([1, 2, 3, 50])  # a long tail
        while (chosen := sched.select(version, [t for t, left in remaining.items() if left == 0])) is None:
            assert any(left > 0 for left in remaining.values()), "waiting with nothing running"
            for t in remaining:
                remaining[t] = max(0, remaining[t] - 1)
        assert len(chosen) == batch
        trained += [(version, t, version - sched.untrained[t]) for t in chosen]
        sched.trained(chosen)
        for t in chosen:
            del remaining[t]
    return trained


@pytest.mark.parametrize("max_lag", [0, 1, 2, 3])
def test_lag_bounded_exact_batches_nothing_lost(max_lag: int) -> None:
    for seed in range(20):
        trained = simulate(batch=4, max_lag=max_lag, steps=30, seed=seed)
        assert max(lag for _, _, lag in trained) <= max_lag
        tickets = [t for _, t, _ in trained]
        assert len(tickets) == len(set(tickets)) == 4 * 30
        assert sorted(tickets)[-1] < 4 * (30 + max_lag)  # the untrained rest is still in flight, not dropped


@pytest.mark.parametrize("max_lag", [1, 2])
def test_trained_lengths_are_the_generated_ones(max_lag: int) -> None:
    """Never discarding for staleness: every generated group is trained, long ones included; only the last
    window (at most the capacity) is still in flight when the run stops."""
    lengths: dict[int, int] = {}
    trained = simulate(batch=4, max_lag=max_lag, steps=30, seed=1, lengths=lengths)
    trained_lengths = Counter(lengths[t] for _, t, _ in trained)
    in_flight = Counter(lengths[t] for t in set(lengths) - {t for _, t, _ in trained})
    assert trained_lengths + in_flight == Counter(lengths.values())
    assert sum(in_flight.values()) <= 4 * (1 + max_lag)
    assert trained_lengths[50] > 0


def test_max_lag_0_is_the_sync_step() -> None:
    sched = StalenessSchedule(batch=2, max_lag=0)
    a, b = sched.admit(0), sched.admit(0)
    assert sched.room() == 0
    assert sched.select(0, [a]) is None  # waits for the whole batch
    assert sched.select(0, [b, a]) == [a, b]


def test_oldest_finished_first_but_due_groups_wait() -> None:
    sched = StalenessSchedule(batch=1, max_lag=1)
    old, young = sched.admit(0), sched.admit(0)
    assert sched.select(0, [young]) == [young]  # nothing is due at version 0: the finished one trains
    sched.trained([young])
    newer = sched.admit(1)
    assert sched.select(1, [newer]) is None  # ``old`` is due at version 1 (lag 1): the step waits for it
    assert sched.select(1, [newer, old]) == [old]
    with pytest.raises(RuntimeError, match="capacity"):
        sched.admit(1) and sched.admit(1)


def test_state_roundtrip() -> None:
    sched = StalenessSchedule(batch=2, max_lag=1)
    for _ in range(3):
        sched.admit(0)
    again = StalenessSchedule(batch=2, max_lag=1)
    again.load_state(sched.state())
    assert again == sched


def test_gc_is_paused_while_the_engine_steps_and_restored_after() -> None:
    """The frontier's engine loop runs with the cyclic collector off (thousands of collections per generation
    at ~1,000 resident requests) and leaves it as it found it, also when the loop raises."""
    import gc

    from reasoning_rl.trainer.frontier import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("engine failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # it was off before: stays off
    finally:
        gc.enable()
