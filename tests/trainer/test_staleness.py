"""The admission / selection rules of continuous rollouts (trainer/staleness.py): the staleness bound holds for
every trained group, every step trains exactly B groups, nothing is discarded, and max_lag=0 is the sync step."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from reasoning_rl.trainer.staleness import StalenessSchedule


def simulate(
    batch: int,
    max_lag: int,
    steps: int,
    seed: int,
    lengths: dict[int, int] | None = None,
    slots: int | None = None,
) -> list[tuple[int, int, int]]:
    """Groups with random generation lengths (recorded in ``lengths``), admitted into free slots (None: the
    batch) at the step's start and after every engine step, as the frontier does; (step version, ticket, lag)
    of every trained group."""
    rng = random.Random(seed)
    sched = StalenessSchedule(batch, max_lag, batch if slots is None else slots)
    lengths = {} if lengths is None else lengths
    remaining: dict[int, int] = {}  # ticket -> engine steps left
    trained: list[tuple[int, int, int]] = []

    def admit(version: int) -> None:
        for _ in range(sched.room(sum(1 for left in remaining.values() if left > 0))):
            ticket = sched.admit(version)
            remaining[ticket] = lengths[ticket] = rng.choice([1, 2, 3, 50])  # a long tail

    for version in range(steps):
        admit(version)
        while (chosen := sched.select(version, [t for t, left in remaining.items() if left == 0])) is None:
            assert any(left > 0 for left in remaining.values()), "waiting with nothing running"
            for t in remaining:
                remaining[t] = max(0, remaining[t] - 1)
            admit(version)
        assert len(chosen) == batch
        trained += [(version, t, version - sched.untrained[t]) for t in chosen]
        sched.trained(chosen)
        for t in chosen:
            del remaining[t]
    return trained


@pytest.mark.parametrize(
    ("max_lag", "slots"), [(0, 4), (0, 1), (1, 4), (1, 8), (1, 2), (2, 4), (2, 12), (3, 5)]
)
def test_lag_bounded_exact_batches_nothing_lost(max_lag: int, slots: int) -> None:
    for seed in range(20):
        trained = simulate(batch=4, max_lag=max_lag, steps=30, seed=seed, slots=slots)
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
    sched = StalenessSchedule(batch=2, max_lag=0, slots=2)
    assert sched.room(0) == 2
    a, b = sched.admit(0), sched.admit(0)
    assert sched.room(2) == sched.room(1) == sched.room(0) == 0  # a finished group frees no room: capacity
    assert sched.select(0, [a]) is None  # waits for the whole batch
    assert sched.select(0, [b, a]) == [a, b]


def test_oldest_finished_first_but_due_groups_wait() -> None:
    sched = StalenessSchedule(batch=1, max_lag=1, slots=2)
    old, young = sched.admit(0), sched.admit(0)
    assert sched.select(0, [young]) == [young]  # nothing is due at version 0: the finished one trains
    sched.trained([young])
    newer = sched.admit(1)
    assert sched.select(1, [newer]) is None  # ``old`` is due at version 1 (lag 1): the step waits for it
    assert sched.select(1, [newer, old]) == [old]
    with pytest.raises(RuntimeError, match="capacity"):
        sched.admit(1) and sched.admit(1)


def test_slots_and_capacity_both_bound_admission() -> None:
    sched = StalenessSchedule(batch=2, max_lag=1, slots=2)
    assert sched.room(0) == 2  # two slots, though the capacity is 4
    a, _ = sched.admit(0), sched.admit(0)
    assert sched.room(2) == 0 and sched.room(1) == 1  # one finished: its slot is free
    sched.admit(0)
    assert sched.room(1) == 1
    sched.admit(0)
    assert sched.room(0) == 0  # every slot free, but 4 untrained: the staleness bound holds admission
    sched.trained([a])
    assert sched.room(0) == 1
    for slots in (0, 5):
        with pytest.raises(ValueError, match=f"slots={slots} must be in 1..batch x"):
            StalenessSchedule(batch=2, max_lag=1, slots=slots)


def test_state_roundtrip() -> None:
    sched = StalenessSchedule(batch=2, max_lag=1, slots=2)
    for _ in range(3):
        sched.admit(0)
    again = StalenessSchedule(batch=2, max_lag=1, slots=2)
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
