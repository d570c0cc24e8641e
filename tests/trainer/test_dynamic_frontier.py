"""Dynamic sampling on the frontier as reject-and-admit (issue 43, trainer/rejection.py): a finished group without
reward spread is rejected, never trained, and another prompt admitted in its place until the step has B
informative groups; at most ``max_refill_rounds x B`` replacements a step, after which the step trains the
informative groups it selected (all of them when none is); the same at ``max_lag = 1``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from rrl_testutil import CountdownEngine, scripted_frontier

from graders.runtime import GradingPool
from reasoning_rl.rollout import Delta, Request
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.frontier import Frontier
from reasoning_rl.trainer.records import Rollouts
from reasoning_rl.trainer.rejection import REJECTED, REPLACED, RejectAndAdmit

# a prompt is (length, answer of sample 0, answer of sample 1); the ground truth is 1
INFORMATIVE = (1, 1, 2)  # one right, one wrong: reward spread
SAME = (1, 2, 2)  # both wrong: no spread


class AnswerEngine(CountdownEngine):
    """``CountdownEngine`` whose sample ``j`` of a group answers its prompt's token ``1 + j``, in its last token."""

    def __init__(self) -> None:
        super().__init__()
        self.answer: dict[str, str] = {}
        self.samples: dict[int, int] = {}  # group -> requests submitted for it

    def submit(self, requests: list[Request]) -> None:
        super().submit(requests)
        for r in requests:
            j = self.samples.get(r.group, 0)
            self.samples[r.group] = j + 1
            self.answer[r.id] = f"\\boxed{{{r.prompt_ids[1 + j]}}}"

    def advance(self) -> list[Delta]:
        return [replace(d, text=self.answer.pop(d.id) if d.finished else "") for d in super().advance()]


def frontier(
    engine: AnswerEngine, pool: GradingPool, rows: list[tuple[int, int, int]], **kw: int
) -> Frontier:
    """The shared scripted frontier, two samples a group, rejecting at most ``rounds x batch`` a step."""
    return scripted_frontier(
        engine,
        pool,
        [list(r) for r in rows],
        n=2,
        batch=kw["batch"],
        max_lag=kw["max_lag"],
        rejection=RejectAndAdmit(kw["batch"], kw["rounds"]),
    )


def uids(rollouts: Rollouts) -> list[str]:
    return sorted({s.example.uid for s in rollouts})


def run(rows: list[tuple[int, int, int]], steps: int, tmp_path: Path, **kw: int) -> list[tuple[Any, ...]]:
    """(trained uids, metrics, frontier) of each step, the engine handed each step's update."""
    engine = AnswerEngine()
    trace = TraceWriter(tmp_path / "trace.jsonl")
    out: list[tuple[Any, ...]] = []
    with GradingPool(workers=1) as pool:
        front = frontier(engine, pool, rows, **kw)
        for step in range(1, steps + 1):
            rollouts, flow = front.next_batch(step, trace)
            out.append((uids(rollouts), flow, front, rollouts))
            engine.load_weights(torch.zeros(0), version=step)
    trace.close()
    return out


def test_uninformative_groups_are_rejected_and_replaced(tmp_path: Path) -> None:
    rows = [INFORMATIVE, SAME, SAME, INFORMATIVE, INFORMATIVE, INFORMATIVE]
    [(trained, flow, front, rollouts)] = run(rows, 1, tmp_path, batch=2, max_lag=0, rounds=1)
    assert trained == ["p0", "p3"]  # p1 and p2 rejected, p2 and p3 admitted in their place
    assert len(rollouts) == 4 and len(rollouts.groups) == 2
    assert flow[REJECTED] == 2.0 and flow[REPLACED] == 2.0
    assert front.sampler.state()["cursor"] == 4  # rejected prompts stay consumed
    state = front.state()
    assert state["groups"] == [] and state["finished"] == [] and state["schedule"]["untrained"] == []


def test_the_bound_holds_then_the_step_trains_what_it_has(tmp_path: Path) -> None:
    """Bound 1 x B = 2 replacements: p1, p2 rejected and replaced, p3 (no spread) is past the budget; of the
    selected p0 and p3 only p0 trains. With nothing informative at all, the selected groups train (advantage 0)."""
    rows = [INFORMATIVE, SAME, SAME, SAME, SAME, SAME]
    [(trained, flow, front, _)] = run(rows, 1, tmp_path, batch=2, max_lag=0, rounds=1)
    assert trained == ["p0"]
    assert flow[REPLACED] == 2.0 and flow[REJECTED] == 3.0
    assert front.sampler.state()["cursor"] == 4  # B + the bound
    [(trained, flow, _, rollouts)] = run([SAME] * 6, 1, tmp_path, batch=2, max_lag=0, rounds=1)
    assert trained == ["p2", "p3"] and len(rollouts.groups) == 2  # the last ones admitted
    assert flow[REPLACED] == 2.0 and flow[REJECTED] == 2.0
    [(trained, flow, _, _)] = run([SAME, INFORMATIVE, INFORMATIVE], 1, tmp_path, batch=2, max_lag=0, rounds=0)
    assert trained == ["p1"] and flow[REPLACED] == 0.0  # no refill rounds: nothing replaced


def test_max_lag_1_trains_b_informative_groups_within_the_lag(tmp_path: Path) -> None:
    lengths = [3, 1, 2, 4, 1, 2, 3, 1, 2, 1, 3, 2, 1, 2, 3, 1]
    rows = [(n, 1, 2 if k % 3 else 1) for k, n in enumerate(lengths)]  # k % 3 == 0: no spread
    steps = run(rows, 4, tmp_path, batch=2, max_lag=1, rounds=2)
    seen: list[str] = []
    for trained, flow, _, rollouts in steps:
        assert len(trained) == 2 and len(rollouts.groups) == 2  # exactly B, every one informative
        assert all(int(uid[1:]) % 3 for uid in trained)
        assert flow["staleness/lag_max"] <= 1.0
        assert flow[REPLACED] <= 4.0
        seen += trained
    assert len(seen) == len(set(seen))  # no group trained twice
    assert sum(flow[REJECTED] for _, flow, _, _ in steps) > 0


def test_a_resumed_frontier_keeps_rejecting_and_loses_no_prompt(tmp_path: Path) -> None:
    """The checkpoint's frontier holds no rejected group; restored (finished groups graded and judged again,
    partial ones resubmitted) it trains B informative groups, and the sampler's cursor moves on from its own."""
    rows = [(n, 1, 2 if k % 3 else 1) for k, n in enumerate([3, 1, 2, 4, 1, 2, 3, 1, 2, 1, 3, 2] * 2)]
    steps = run(rows, 2, tmp_path, batch=2, max_lag=1, rounds=2)
    front = steps[-1][2]
    state, cursor = front.state(), front.sampler.state()
    assert all(front.judged.get(g["ticket"], True) for g in state["groups"])  # graded ones: all informative
    engine = AnswerEngine()
    engine.version = 2
    trace = TraceWriter(tmp_path / "resumed.jsonl")
    with GradingPool(workers=1) as pool:
        resumed = frontier(engine, pool, rows, batch=2, max_lag=1, rounds=2)
        resumed.sampler.load_state(cursor)
        resumed.load_state(state)
        rollouts, flow = resumed.next_batch(3, trace)
    trace.close()
    trained = uids(rollouts)
    assert len(trained) == 2 and all(int(uid[1:]) % 3 for uid in trained)
    assert not set(trained) & {uid for t, *_ in steps for uid in t}
    assert flow["staleness/lag_max"] <= 1.0
