"""Admission by slots (issue 44, trainer/frontier.py + trainer/staleness.py): the frontier keeps
``rollout.running_groups`` groups generating, admitting one whenever another finishes (after every ``advance``),
while at most ``B x (1 + max_lag)`` are untrained. Admitting that whole bound at once made every group finish
together at ~40 % of samples at the length cap: every other step generated two batches and the next nothing
(0.44x of sync on one H200).

A scripted engine (one token per live request per ``advance``; a request as long as its prompt's single token
id says, less what a resubmission already carries) drives the real ``Frontier``; it counts the requests in it
at every ``advance``. Nothing here depends on timing: lengths are scripted, seeds fixed, and the frontier's
clock moves one second per engine step (so the running-batch metrics, shares of generation time, are exact)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rrl_testutil import CountdownEngine, scripted_frontier

from graders.runtime import GradingPool
from reasoning_rl.rollout import Delta, Request
from reasoning_rl.step_cost import COUNTER, StepCost
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer import frontier as frontier_module
from reasoning_rl.trainer.frontier import Frontier
from reasoning_rl.trainer.records import Rollouts

N = 2  # samples a group
BATCH = 4


class CountingEngine(CountdownEngine):
    """``CountdownEngine`` that records, at every ``advance``, the requests it holds and the frontier's untrained
    groups; a resubmitted request (prompt + partial tokens) generates only what its sample still lacks."""

    def __init__(self, version: int = 0) -> None:
        super().__init__(version)
        self.frontier: Frontier | None = None
        self.seen: list[tuple[int, int]] = []  # (requests in the engine, untrained groups) at each advance
        self.submits: list[tuple[int, list[Request]]] = []  # (advances before it, its requests)

    def submit(self, requests: list[Request]) -> None:
        self.submits.append((len(self.seen), requests))
        for r in requests:
            self.left[r.id] = r.prompt_ids[0] - (len(r.prompt_ids) - 1)  # prompts are one token

    def advance(self) -> list[Delta]:
        assert self.frontier is not None
        self.seen.append((len(self.left), len(self.frontier.schedule.untrained)))
        CLOCK.now += 1.0  # generation time is engine steps: the running-batch metrics become exact
        return list(super().advance())


class Clock:
    """The frontier's clock (``time.time``), moved only by the engine's steps."""

    def __init__(self) -> None:
        self.now = 0.0

    def time(self) -> float:
        return self.now


CLOCK = Clock()


@pytest.fixture(scope="module")
def pool() -> Iterator[GradingPool]:
    with GradingPool(workers=1) as p:
        yield p


@pytest.fixture(autouse=True)
def _clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frontier_module, "time", CLOCK)


@pytest.fixture
def trace(tmp_path: Path) -> Iterator[TraceWriter]:
    t = TraceWriter(tmp_path / "trace.jsonl")
    yield t
    t.close()


def make(pool: GradingPool, lengths: list[int], engine: CountingEngine, **kw: Any) -> Frontier:
    """A scripted frontier of ``N`` samples a group and batch ``BATCH`` over prompts of these lengths."""
    front = scripted_frontier(engine, pool, [[n] for n in lengths], n=N, batch=BATCH, **kw)
    engine.frontier = front
    return front


def drive(
    front: Frontier, engine: CountingEngine, trace: TraceWriter, first: int, last: int
) -> list[tuple[Rollouts, dict[str, float]]]:
    """Steps ``first..last``, each followed by its update's hand-off (parking first, as the trainer does)."""
    out = []
    for step in range(first, last + 1):
        out.append(front.next_batch(step, trace))
        front.park()
        engine.load_weights([], version=step)
    return out


def random_lengths(seed: int, size: int = 64) -> list[int]:
    """Prompt lengths 1..8 (the scripted max_tokens), a quarter at the cap."""
    rng = random.Random(seed)
    return [8 if rng.random() < 0.25 else rng.randint(1, 7) for _ in range(size)]


@pytest.mark.parametrize(("max_lag", "running_groups"), [(1, None), (2, None), (2, 6), (3, 2)])
def test_the_running_batch_stays_at_the_target_while_the_staleness_bound_allows(
    pool: GradingPool, trace: TraceWriter, max_lag: int, running_groups: int | None
) -> None:
    """(a) At every ``advance`` the engine holds ``running_groups x n`` requests (a group's samples are equally
    long here), unless the staleness bound holds admission back (``B x (1 + max_lag)`` untrained)."""
    target = (BATCH if running_groups is None else running_groups) * N
    capacity = BATCH * (1 + max_lag)
    full = held = 0
    for seed in range(6):
        engine = CountingEngine()
        front = make(pool, random_lengths(seed), engine, max_lag=max_lag, running_groups=running_groups)
        drive(front, engine, trace, 1, 10)
        for requests, untrained in engine.seen:
            assert requests == target or (untrained == capacity and requests < target), (requests, untrained)
            full += requests == target
            held += requests < target
    assert full > held  # the bound holds admission back at times, not as a rule


def test_equal_lengths_generate_one_batch_a_step_not_two_then_none(
    pool: GradingPool, trace: TraceWriter
) -> None:
    """(b) Issue 44's workload: every sample at the length cap. Admitting ``B x (1 + max_lag)`` groups at once
    (``running_groups`` = that bound, what ``max_lag`` alone did) generates two batches in one step and none in
    the next; ``B`` groups in slots (the default) generate one batch's worth every step."""
    batch_tokens = BATCH * N * 8
    engine = CountingEngine()
    default = drive(make(pool, [8] * 64, engine, max_lag=1), engine, trace, 1, 8)
    assert [flow["rollout/generated_tokens"] for _, flow in default] == [batch_tokens] * 8
    assert all(requests == BATCH * N for requests, _ in engine.seen)
    assert [(flow["rollout/running_full_frac"], flow["rollout/running_mean"]) for _, flow in default] == [
        (1.0, BATCH * N)
    ] * 8  # the share of generation time at >= 0.8x the target running batch, and its mean
    engine = CountingEngine()
    at_once = drive(make(pool, [8] * 64, engine, max_lag=1, running_groups=2 * BATCH), engine, trace, 1, 8)
    assert [flow["rollout/generated_tokens"] for _, flow in at_once] == [2 * batch_tokens, 0] * 4
    assert [flow["rollout/running_full_frac"] for _, flow in at_once][:2] == [7 / 8, 0.0]  # full till the end


@pytest.mark.parametrize("resident", [True, False])
@pytest.mark.parametrize(("max_lag", "running_groups"), [(1, None), (1, 8), (2, 1), (2, None), (3, 7)])
def test_every_trained_token_lags_at_most_max_lag_nothing_lost_or_trained_twice(
    pool: GradingPool, trace: TraceWriter, max_lag: int, running_groups: int | None, resident: bool
) -> None:
    """(c) Under random lengths, every trained token's version lags the trainer by 0..max_lag, with requests
    kept resident or parked and resubmitted across the update; (d) every admitted group is trained exactly once
    or still in flight, whole (each sample as long as its prompt says), exactly B a step."""
    for seed in range(5):
        lengths = random_lengths(seed)
        engine = CountingEngine()
        front = make(pool, lengths, engine, max_lag=max_lag, running_groups=running_groups, resident=resident)
        trained: list[int] = []
        for step, (rollouts, flow) in enumerate(drive(front, engine, trace, 1, 10), start=1):
            assert len(rollouts.groups) == BATCH and len(rollouts) == BATCH * N
            for s in rollouts:
                versions = s.completion.versions or []
                assert versions and all(0 <= (step - 1) - v <= max_lag for v in versions), (step, versions)
                assert len(s.completion.token_ids) == lengths[int(s.example.uid[1:])]
            assert flow["staleness/lag_max"] <= max_lag
            trained += sorted({s.completion.prompt_index for s in rollouts})
        assert len(trained) == len(set(trained)) == 10 * BATCH
        in_flight = set(front.groups)
        assert in_flight == set(front.schedule.untrained) and not in_flight & set(trained)
        assert sorted([*trained, *in_flight]) == list(range(front.schedule.next_ticket))
        assert front.sampler.state()["cursor"] == front.schedule.next_ticket  # one prompt drawn per group


def test_a_resume_with_other_running_groups_loses_nothing(pool: GradingPool, trace: TraceWriter) -> None:
    """(d) A checkpoint of a frontier that ran 2B groups at once, resumed with B slots: the groups over the new
    target drain (admission waits for them), nothing is lost or trained twice, and the lag bound holds."""
    lengths = random_lengths(7)
    engine = CountingEngine()
    front = make(pool, lengths, engine, max_lag=2, running_groups=2 * BATCH)
    first = drive(front, engine, trace, 1, 1)
    state, cursor = front.state(), front.sampler.state()
    resident = len(engine.left)
    assert resident > BATCH * N  # the checkpoint holds more unfinished groups than the new target
    engine = CountingEngine(version=1)
    resumed = make(pool, lengths, engine, max_lag=2)
    resumed.sampler.load_state(cursor)
    resumed.load_state(state)
    second = drive(resumed, engine, trace, 2, 9)
    trained = [s.completion.prompt_index for rollouts, _ in first + second for s in rollouts]
    assert len(trained) == 9 * BATCH * N and len(set(trained)) == 9 * BATCH
    assert sorted([*set(trained), *resumed.groups]) == list(range(resumed.schedule.next_ticket))
    assert all(flow["staleness/lag_max"] <= 2 for _, flow in second)
    assert engine.seen[0][0] == resident  # all resubmitted, nothing admitted beside them
    assert engine.seen[-1][0] <= BATCH * N  # drained to the target


def test_max_lag_0_is_the_synchronous_step(pool: GradingPool, trace: TraceWriter) -> None:
    """``max_lag = 0`` (``running_groups`` = B): one submission of ``B x n`` requests at each step's start, in
    (group, sample) order, with the step's seed, each group's place among them and no mid-step admission, and
    the step trains exactly those groups: the requests, seeds and order of the synchronous step."""
    lengths = random_lengths(3)
    engine = CountingEngine()
    front = make(pool, lengths, engine, max_lag=0)
    out = drive(front, engine, trace, 1, 5)
    assert len(engine.submits) == 5
    advances = 0
    for step, ((at, requests), (rollouts, _)) in enumerate(zip(engine.submits, out, strict=True), start=1):
        groups = [(step - 1) * BATCH + k for k in range(BATCH)]
        assert at == advances  # at the step's start: after the previous step's last advance
        assert [(r.group, r.seed, r.sampling.prompt_offset) for r in requests] == [
            (g, step + j, k) for k, g in enumerate(groups) for j in range(N)
        ]
        assert [r.prompt_ids[0] for r in requests] == [lengths[g] for g in groups for _ in range(N)]
        assert sorted(rollouts.groups) == list(range(BATCH))
        assert sorted({s.completion.prompt_index for s in rollouts}) == groups
        advances += max(lengths[g] for g in groups)  # the longest group ends the step
    assert advances == len(engine.seen)


@pytest.mark.parametrize(("max_lag", "running_groups"), [(0, None), (2, 6)])
def test_every_engine_step_lands_in_the_cost_curve(
    pool: GradingPool, trace: TraceWriter, max_lag: int, running_groups: int | None
) -> None:
    """The per-engine-step cost curve (``reasoning_rl/step_cost``), sync and continuous: each step's ``engine_steps``
    counters hold exactly the engine steps the engine saw in it, bucketed by the requests it held (2-wide buckets
    here, the last open at the target), each 1 s long (the clock moves only inside ``advance``), and the tokens
    they sampled are the step's generated tokens; the metrics line has their count and mean."""
    target = (BATCH if running_groups is None else running_groups) * N
    engine = CountingEngine()
    front = make(pool, random_lengths(4), engine, max_lag=max_lag, running_groups=running_groups)
    front.cost = StepCost(target, width=2)
    for step in range(1, 7):
        seen = len(engine.seen)
        _, flow = front.next_batch(step, trace)
        batches = [requests for requests, _ in engine.seen[seen:]]
        expect: dict[int, list[int]] = {}
        for requests in batches:
            sums = expect.setdefault(2 * min(requests // 2, target // 2), [0, 0])
            sums[0] += 1
            sums[1] += requests
        records = [
            json.loads(line) for line in trace.path.read_text().splitlines()
        ]  # the trace is still open
        counters = [c for c in records if c.get("name") == COUNTER and c["step"] == step]
        assert {c["attrs"]["lo"]: [c["value"], c["attrs"]["requests"]] for c in counters} == expect
        assert all(c["attrs"]["seconds"] == c["attrs"]["engine_s"] == c["value"] for c in counters)
        assert sum(c["attrs"]["tokens"] for c in counters) == flow["rollout/generated_tokens"] == sum(batches)
        assert flow["rollout/engine_steps"] == len(batches)
        assert flow["rollout/engine_step_ms"] == (1000.0 if batches else 0.0)
        front.park()
        engine.load_weights([], version=step)
