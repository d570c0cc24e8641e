"""``LiveEngine`` (a split rollout rank's engine, decoding on its own) and ``RemoteEngine`` (the driver's view of
the rollout ranks) on a fake continuous engine: deltas buffered and none lost or duplicated, every token stamped
with the version of the weights that produced it (the engine's own), the swap between two decode steps, abort,
the paused mode
stepping only when asked, the decode thread's failure surfacing, and the thread stopping on close. The last test
swaps real weights (the HF engine) through ``receive_weights``: a dropped tensor fails that step's swap; a
plugin engine that only streams is never made live (the driver refuses the run)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from rrl_testutil import InProcessWire

from reasoning_rl.distributed import live_engine
from reasoning_rl.distributed.live_engine import WAIT_S, Advanced, LiveEngine
from reasoning_rl.distributed.rank import EngineRank, RankArgs
from reasoning_rl.distributed.remote_engine import RemoteEngine
from reasoning_rl.rollout import Delta, Request, SamplingConfig


class FakeEngine:
    """A continuous engine whose request ``r`` yields tokens 0, 1, ... up to its ``max_tokens``, one per step
    (log-prob -token), each stamped with the version it holds; it fails the test if two threads ever step or
    change it at once."""

    def __init__(
        self,
        step_s: float = 0.0,
        fail_at: int | None = None,
        gate: threading.Event | None = None,
        version: int = 0,
        budget: threading.Semaphore | None = None,
    ) -> None:
        self.version = version
        self.gate = gate  # when given, each step waits for it (the test decides when a step ends)
        self.budget = budget  # when given, a step runs only on one of its releases (else it is idle)
        self.left: dict[str, int] = {}
        self.made: dict[str, int] = {}
        self.steps = 0
        self.sampled = 0
        self.step_s = step_s
        self.fail_at = fail_at
        self.busy = False

    def _enter(self) -> None:
        assert not self.busy, "the engine was used from two threads at once"
        self.busy = True

    def submit(self, requests: list[Request]) -> None:
        self._enter()
        for r in requests:
            self.left[r.id] = r.sampling.max_tokens
            self.made[r.id] = 0
        self.busy = False

    def advance(self) -> list[Delta]:
        if self.budget is not None and not self.budget.acquire(blocking=False):
            time.sleep(0.001)  # no step allowed yet: an idle step (no spin), not counted
            return []
        self._enter()
        self.steps += 1
        if self.fail_at is not None and self.steps >= self.fail_at:
            self.busy = False
            raise ValueError("engine step failed")
        time.sleep(self.step_s)
        if self.gate is not None:
            assert self.gate.wait(60), "the test never let the step end"
        out = []
        for rid in list(self.left):
            tok = self.made[rid]
            self.made[rid] += 1
            self.left[rid] -= 1
            done = self.left[rid] == 0
            if done:
                del self.left[rid]
            out.append(
                Delta(rid, [tok], [-float(tok)], "", done, "length" if done else "", version=self.version)
            )
        self.sampled += len(out)
        self.busy = False
        return out

    def load_weights(self, named_tensors: Any, *, version: int) -> None:
        self._enter()
        self.version = version
        self.busy = False

    def abort(self, ids: list[str]) -> None:
        self._enter()
        for rid in ids:
            self.left.pop(rid, None)
        self.busy = False

    def running(self) -> int:
        return len(self.left)

    def partial(self, ids: list[str]) -> list[Delta]:
        return []  # every token went out with a delta

    def wake(self) -> None:
        return None  # never asleep


def _requests(n: int, tokens: int, start: int = 0) -> list[Request]:
    sampling = SamplingConfig(max_tokens=tokens)
    return [Request(f"r{i}", [1, 2], sampling, None, group=i) for i in range(start, start + n)]


def _drain(live: LiveEngine, ids: set[str], timeout: float = 20.0) -> dict[str, list[Delta]]:
    """Advance until every request in ``ids`` finished; each request's deltas in arrival order."""
    got: dict[str, list[Delta]] = {i: [] for i in ids}
    deadline = time.monotonic() + timeout
    while not all(got[i] and got[i][-1].finished for i in ids):
        assert time.monotonic() < deadline, "requests never finished"
        for d in live.advance().deltas:
            got[d.id].append(d)
    return got


def _tokens(deltas: list[Delta]) -> list[int]:
    return [t for d in deltas for t in d.token_ids]


def test_overlap_decodes_without_the_driver_and_loses_or_repeats_nothing() -> None:
    engine = FakeEngine(step_s=0.001)
    engine.version = 3
    live = LiveEngine(engine, overlap=True)
    try:
        live.submit(_requests(4, 30))
        deadline = time.monotonic() + 10
        while engine.steps < 5:  # no advance was called: the rank's own thread decodes
            assert time.monotonic() < deadline
            time.sleep(0.005)
        got = _drain(live, {f"r{i}" for i in range(4)})
        for deltas in got.values():
            assert _tokens(deltas) == list(range(30))  # every token once, in order
            assert [d.finished for d in deltas].count(True) == 1 and deltas[-1].finished
            assert {d.version for d in deltas} == {3}
        assert live.advance().deltas == []  # nothing left buffered
    finally:
        live.close()


def test_paused_steps_exactly_once_per_advance() -> None:
    engine = FakeEngine()
    live = LiveEngine(engine, overlap=False)
    live.submit(_requests(2, 3))
    time.sleep(3 * WAIT_S)
    assert engine.steps == 0  # nothing steps it between the driver's calls
    first = live.advance()
    assert engine.steps == 1 and first == Advanced(
        [
            Delta("r0", [0], [-0.0], "", False, "", version=0),
            Delta("r1", [0], [-0.0], "", False, "", version=0),
        ],
        2,
        2,
    )
    assert live.swap(lambda: engine.load_weights([], version=1)) is None and live.overlapped == 0
    assert live.version == 1  # the engine's own record
    got = _drain(live, {"r0", "r1"})
    assert engine.steps == 3
    assert [d.version for d in got["r0"]] == [1, 1]  # decoded after the swap: the new version
    assert live.advance() == Advanced([], 0, 6) and engine.steps == 3  # no live request: no step


def test_swap_runs_between_two_steps_and_stamps_the_new_version() -> None:
    """The load runs while the engine is not stepping (the fake would fail on a concurrent step), tokens
    decoded before it carry the old version and after it the new one, and ``overlapped`` counts the tokens the
    thread decoded since the driver's last advance."""
    budget = threading.Semaphore(0)
    engine = FakeEngine(budget=budget)
    live = LiveEngine(engine, overlap=True)
    try:
        live.submit(_requests(2, 200))
        budget.release(3)  # three steps before the driver's advance (however the threads are scheduled)
        _wait_for(lambda: engine.steps == 3)
        seen = live.advance().deltas
        assert len(seen) == 2 * 3
        budget.release(2)  # the trainer's update: the thread decodes two steps alone
        _wait_for(lambda: engine.steps == 5)

        def load() -> int:
            assert not engine.busy
            steps = engine.steps
            time.sleep(0.05)  # a slow load: the thread must wait for it
            assert engine.steps == steps
            engine.load_weights([], version=1)
            return steps

        at = live.swap(load)
        assert live.version == 1
        assert at == 5 and live.overlapped == 2 * 2  # the two steps since the advance, two requests each
        budget.release(200)
        got = _drain(live, {"r0", "r1"})
        for rid in ("r0", "r1"):
            deltas = [d for d in seen if d.id == rid] + got[rid]
            assert _tokens(deltas) == list(range(200))
            versions = [d.version for d in deltas for _ in d.token_ids]
            assert versions == sorted(versions) and set(versions) == {0, 1}
            assert versions.count(0) == at  # one token per step: exactly the steps before the swap
        overlapped = sum(len(d.token_ids) for d in got["r0"] + got["r1"] if d.version == 0)
        assert live.overlapped == overlapped  # every old-version token taken after the last advance
    finally:
        live.close()


def test_abort_drops_the_request_and_its_buffered_deltas() -> None:
    engine = FakeEngine(step_s=0.001)
    live = LiveEngine(engine, overlap=True)
    try:
        live.submit(_requests(3, 100))
        deadline = time.monotonic() + 10
        while engine.steps < 3:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        live.abort(["r1"])
        got = _drain(live, {"r0", "r2"})
        assert _tokens(got["r0"]) == list(range(100))
        assert all(d.id != "r1" for d in live.advance().deltas)
        assert "r1" not in engine.left
    finally:
        live.close()


def test_advance_waits_briefly_only_while_requests_are_live(monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing live it returns at once; with a step under way it waits for that step, and the decode
    thread does not start the next one before the driver took the lock (no starvation). The step ends when the
    test says so (an event), never after a delay the load could stretch."""
    gate = threading.Event()
    engine = FakeEngine(gate=gate)
    live = LiveEngine(engine, overlap=True)
    try:
        with monkeypatch.context() as m:
            m.setattr(live_engine, "WAIT_S", 60.0)
            t = time.monotonic()
            assert live.advance() == Advanced([], 0, 0)  # nothing live: at once, not after WAIT_S
            assert time.monotonic() - t < 30  # a hang guard, far below the 60 s it would otherwise wait
        live.submit(_requests(1, 5))
        _wait_for(lambda: engine.busy)  # the thread is inside its first step
        got: list[Advanced] = []
        t = time.monotonic()
        driver = threading.Thread(target=lambda: got.append(live.advance()))
        driver.start()
        _wait_for(lambda: live._waiting == 1)  # WAIT_S passed with no delta: the driver queues for the lock
        waited = time.monotonic() - t
        gate.set()  # the step ends; the thread must let the queued driver in before its next step
        driver.join(60)
        assert len(got) == 1 and len(got[0].deltas) == 1 and waited >= WAIT_S * 0.9, (got, waited)
    finally:
        gate.set()
        live.close()


def _wait_for(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (another thread's progress); the deadline is a hang guard only."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, "the awaited state never came"
        time.sleep(0.001)


def test_a_failed_decode_step_surfaces_in_the_next_call() -> None:
    live = LiveEngine(FakeEngine(fail_at=3), overlap=True)
    try:
        live.submit(_requests(1, 10))
        with pytest.raises(RuntimeError, match="decode thread failed: ValueError"):
            _drain(live, {"r0"})
    finally:
        live.close()


def test_close_stops_the_decode_thread() -> None:
    engine = FakeEngine(step_s=0.001)
    live = LiveEngine(engine, overlap=True)
    live.submit(_requests(1, 10_000))
    time.sleep(0.05)
    live.close()
    assert live._thread is not None and not live._thread.is_alive()
    steps = engine.steps
    time.sleep(0.05)
    assert engine.steps == steps


class _Ranks:
    """``EngineRanks`` over in-process live engines, recording each call's per-rank arguments."""

    def __init__(self, lives: list[LiveEngine]) -> None:
        self.lives = lives
        self.calls: list[tuple[Callable[..., Any], list[tuple[Any, ...]]]] = []

    @property
    def engine_count(self) -> int:
        return len(self.lives)

    def call_each_engine(self, method: Callable[..., Any], per_rank: Sequence[RankArgs[...]]) -> list[Any]:
        self.calls.append((method, [a.args for a in per_rank]))
        name = method.__name__.removeprefix("live_")
        return [getattr(live, name)(*a.args) for live, a in zip(self.lives, per_rank, strict=True)]


def test_remote_engine_keeps_a_group_on_one_rank_and_gathers_every_rank() -> None:
    engines = [FakeEngine(), FakeEngine()]
    ranks = _Ranks([LiveEngine(e, overlap=False) for e in engines])
    remote = RemoteEngine(ranks)
    sampling = SamplingConfig(max_tokens=2)
    requests = [Request(f"g{g}s{s}", [1], sampling, None, group=g) for g in range(3) for s in range(2)]
    remote.submit(requests)
    assert sorted(engines[0].left) == ["g0s0", "g0s1", "g2s0", "g2s1"] and sorted(engines[1].left) == [
        "g1s0",
        "g1s1",
    ]
    remote.abort(["g1s1", "g2s0"])
    assert ranks.calls[-1] == (EngineRank.live_abort, [(["g2s0"],), (["g1s1"],)])
    first = remote.advance()
    assert [d.id for d in first] == ["g0s0", "g0s1", "g2s1", "g1s0"] and remote.running() == 4
    assert all(d.finished for d in remote.advance()) and remote.running() == 0
    assert remote._where == {}


def test_swap_with_a_dropped_tensor_fails_the_step(tiny_model_dir: Any) -> None:
    """Real weights through ``receive_weights`` with a live engine's swap (the HF engine takes them, the
    trainer's side sends over an in-process wire): a correct hand-off passes the gate inside the swap and the
    engine records the version it was given; one that drops a tensor fails the step naming it (the engine
    records the version it loaded, one tensor short: the gate's failure stops the run)."""
    from reasoning_rl.algorithms import LossConfig
    from reasoning_rl.distributed.broadcast import receive_weights, send_weights
    from reasoning_rl.freshness import FreshnessGate, Probe, WeightSyncError
    from reasoning_rl.policy import Policy
    from reasoning_rl.policy.batch import TokenBatch
    from reasoning_rl.rollout import make_engine

    policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-2, micro_batch_tokens=256)
    engine = make_engine("hf", str(tiny_model_dir), max_model_len=128)
    prompts = [[7 + (i * 5 + k) % 60 for k in range(24)] for i in range(2)]
    decoding = FakeEngine(step_s=0.001)
    live = LiveEngine(decoding, overlap=True)
    live.submit(_requests(2, 100_000))
    good = engine.load_weights
    name = "model.layers.1.mlp.down_proj.weight"
    try:
        for step, drop in ((1, False), (2, True)):
            g = torch.Generator().manual_seed(step)
            batch = TokenBatch([torch.randint(7, 90, (20,), generator=g) for _ in range(4)], [10] * 4)
            policy.train_step(batch, torch.randn(4, generator=g), None, None, LossConfig())
            if drop:
                engine.load_weights = lambda it, *, version: good(  # type: ignore[method-assign]
                    ((n, t) for n, t in it if n != name), version=version
                )
            wire = InProcessWire()
            gate = FreshnessGate(Probe.from_prompts(prompts))
            sender = threading.Thread(
                target=send_weights,
                args=(policy, wire.end(0)),
                kwargs={"bucket_bytes": 1 << 16, "gate": gate},
            )
            sender.start()
            try:
                if not drop:
                    stats = receive_weights(engine, wire.end(1), version=step, gate=gate, swap=live.swap)
                    assert stats.check is not None and stats.check.probe_gap <= stats.check.probe_tol
                    assert engine.version == 1
                else:
                    with pytest.raises(WeightSyncError, match=rf"hand-off of step 2: tensor {name}"):
                        receive_weights(engine, wire.end(1), version=step, gate=gate, swap=live.swap)
                    assert engine.version == 2
            finally:
                sender.join(60)
        assert decoding.steps > 0  # it decoded throughout
    finally:
        live.close()


def test_a_plugin_engine_that_only_generates_is_stepped_on_split_ranks(tmp_path: Any) -> None:
    """Split placement with ``rollout.max_lag > 0`` and a plugin engine without ``submit``/``advance``: the
    rollout rank builds it as a generating engine (no decode thread), so the driver's ``continuous_engine`` is
    None and the run's frontier drives the ranks' engine view step by step (``Stepped``: nothing resident across
    an update), the same one loop, instead of a second path or a refusal."""
    from reasoning_rl.config import Config
    from reasoning_rl.distributed.rollout_worker import RolloutWorker
    from reasoning_rl.distributed.worker import WorkerSpec
    from reasoning_rl.registry import ENGINES
    from reasoning_rl.rollout import ContinuousEngine

    class Streams:
        def __init__(self, model_path: str, **kw: Any) -> None:
            self.model_path = model_path

        def generate(self, prompts: Any, sampling: Any) -> list[Any]:
            return []

    ENGINES.register("streams_only_test")(Streams)
    try:
        cfg = Config.model_validate(
            {
                "model": {"path": str(tmp_path)},
                "run": {"dir": str(tmp_path / "run")},
                "data": {"train": {"generator": "fixed_digit", "size": 4}},
                "rollout": {"engine": "streams_only_test", "max_lag": 1, "freshness_check": False},
                "resources": {"placement": "split", "rollout_ranks": 1},
            }
        )
        spec = WorkerSpec(cfg, tmp_path, "cpu", "float32", 64)
        worker = RolloutWorker.build(spec, None, rank=1)  # type: ignore[arg-type]  # no hand-off needed here
    finally:
        ENGINES.unregister("streams_only_test")
    assert isinstance(worker.engine, Streams) and not isinstance(worker.engine, ContinuousEngine)
    assert not worker.continuous()

    # the driver then sees no continuous engine on the rollout ranks: the frontier steps their engine view
    from types import SimpleNamespace

    from reasoning_rl.rollout.stepped import Stepped
    from reasoning_rl.trainer.build import Components

    view = Streams(str(tmp_path))
    parts = SimpleNamespace(group=SimpleNamespace(continuous_engine=lambda: None), engine=view)
    stepped = Components.rollout_engine(parts)  # type: ignore[arg-type]  # only group and engine are read
    assert isinstance(stepped, Stepped) and stepped.engine is view


def test_gated_engine_decodes_one_group_at_a_time_and_wakes_after_a_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The overlapped split test's engine (``gated_engine.py``) over a live rank: groups enter in admission
    order ``SLOTS`` at a time, the decode thread steps once per driver advance, and ``wake`` (the hand-off's
    first call) returns once a step followed the last advance; on a rank that does not decode then (paused) it
    fails instead of letting the test pass without overlap."""
    from tests.distributed import gated_engine

    live = LiveEngine(gated_engine.GatedEngine(FakeEngine()), overlap=True)
    try:
        live.submit(_requests(2 * gated_engine.SLOTS, 3))
        first = {f"r{i}" for i in range(gated_engine.SLOTS)}
        seen: list[set[str]] = []
        while len(seen) < 4:
            engine = live.engine
            assert isinstance(engine, gated_engine.GatedEngine)
            engine.wake()  # returns only once the thread stepped after the last advance
            if deltas := live.advance().deltas:
                assert len({d.id for d in deltas}) == len(deltas)  # one step's deltas: one per request
                seen.append({d.id for d in deltas})
        assert (
            seen[:3] == [first] * 3 and not seen[3] & first
        )  # the second group only once the first finished
    finally:
        live.close()
    monkeypatch.setattr(gated_engine, "HANG_S", 0.2)
    paused = gated_engine.GatedEngine(FakeEngine())
    stepped = LiveEngine(paused, overlap=False)
    stepped.submit(_requests(1, 3))
    assert len(stepped.advance().deltas) == 1
    with pytest.raises(RuntimeError, match="did not decode during the update"):
        paused.wake()  # nothing steps a paused rank between the driver's advances
