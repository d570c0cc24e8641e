"""Helpers shared by test modules (a uniquely named module: several ``conftest.py`` files exist, so
``from conftest import ...`` would pick whichever was imported first)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A file under ../shared, or a visible skip when this checkout has none."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found: ../shared is absent in this checkout")
    return path


def sample_rows(run: Path, step: int) -> list[dict[str, Any]]:
    """The rows of ``samples/step_<step>.jsonl`` of a run."""
    return [json.loads(line) for line in (run / "samples" / f"step_{step}.jsonl").read_text().splitlines()]


def bounded_lag(run: Path, steps: int, samples: int, max_lag: int) -> int:
    """Every trained token of steps 1..steps carries its version, lagging the trainer by 0..max_lag, and each
    sample's versions only grow: how many samples span two versions."""
    spans = 0
    for step in range(1, steps + 1):
        rows = sample_rows(run, step)
        assert len(rows) == samples
        for r in rows:
            versions = r["versions"]
            assert versions and versions == sorted(versions)
            assert all(0 <= (step - 1) - v <= max_lag for v in versions), (step, versions)
            spans += versions[-1] > versions[0]
    return spans


# The fault of each process of a kill test (RRL_FAULT=<phase>:<n>, counted in that process; a resumed process
# hands its weights off once before its first step). Where each lands is deterministic for the seeds, not
# hard-coded.
KILLS = [
    "checkpoint:2",  # the first checkpoint complete, killed writing the second
    "generate:2",  # resubmitted the checkpoint's partial samples, killed between engine steps
    "update:2",  # killed after the optimizer step of its second step
    "handoff:3",  # killed streaming its second step's weights into the engine
    "handoff:1",  # killed during the resume's own hand-off
]


def latest_checkpoint(run: Path) -> int | None:
    """The step of the run's newest complete checkpoint (None: none yet)."""
    done = [int(p.parent.name.split("_")[1]) for p in (run / "checkpoints").glob("step_*/COMPLETE")]
    return max(done, default=None)


def kill_at_every_point(run: Path, steps: int, kill: Callable[[int, str], None]) -> int:
    """The run killed at each of ``KILLS`` in turn by ``kill(i, fault)`` (each process resuming the last): a
    checkpoint survives every kill, and each is no older than the last. The step the final resume starts from."""
    latest: list[int] = []
    for i, fault in enumerate(KILLS):
        kill(i, fault)
        step = latest_checkpoint(run)
        assert step is not None, fault  # a checkpoint survives every kill
        latest.append(step)
    assert latest == sorted(latest), latest
    resumed = latest_checkpoint(run)
    assert resumed is not None and resumed < steps
    return resumed


def lossless(run: Path, steps: int, batch: int) -> list[dict[str, Any]]:
    """No prompt lost or trained twice across kills and resumes (one epoch of the 32 prompts), and a resume
    resubmitted the checkpoint's unfinished samples: the metrics lines of every run."""
    trained = [
        uid
        for step in range(1, steps + 1)
        for uid in sorted({r["id"].split("#")[0] for r in sample_rows(run, step)})
    ]
    state = json.loads((run / "checkpoints" / f"step_{steps}" / "trainer_state.json").read_text())
    frontier = state["frontier"]
    in_flight = [g["uid"] for g in frontier["groups"]]
    drawn = frontier["schedule"]["next_ticket"]
    assert drawn <= 32  # one epoch of the 32 prompts: a prompt drawn twice would show as a repeated uid
    assert len(trained) == len(set(trained)) == steps * batch  # none trained twice
    assert not set(trained) & set(in_flight)
    assert len(trained) + len(in_flight) == drawn  # none lost: every drawn prompt trained or still in flight
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in lines if "reward/mean" in r]  # every run's lines, resumed ones appended
    assert any(r["rollout/resubmitted"] > 0 for r in rows)  # a resume resubmitted the partial samples
    return rows


def still_alive(pids: list[int], budget_s: float = 60.0) -> list[int]:
    """The ``pids`` still alive (zombies count as gone) after waiting up to ``budget_s`` for them to go: a hang
    guard, so a test asserts the kill (an empty list), never how fast it was."""
    import psutil

    def alive(pid: int) -> bool:
        try:
            return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + budget_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def two_ranks(script: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``script args`` on two local processes (``torch.distributed.run``, gloo on CPU: a free port, one OMP
    thread each, this checkout first on the path); fails the test, with the end of stderr, unless both exit 0."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    cmd += ["--master_port", str(free_port()), str(script), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


class InProcessWire:
    """Both ends of a split-placement ``HandoffGroup`` in one process (a queue): member 0 sends; the receiving
    end can change one named tensor in transit (``corrupt``), as a broken transport would."""

    def __init__(self, corrupt: str | None = None) -> None:
        import queue

        self.q: queue.Queue[Any] = queue.Queue()
        self.corrupt = corrupt
        self._next_names: list[str] = []

    def end(self, member: int) -> WireEnd:
        return WireEnd(self, member)


class WireEnd:
    def __init__(self, wire: InProcessWire, member: int) -> None:
        self.wire, self.member = wire, member

    def broadcast_object(self, obj: Any) -> Any:
        if self.member == 0:
            self.wire.q.put(obj)
            return obj
        got = self.wire.q.get(timeout=60)
        if isinstance(got, list):
            self.wire._next_names = [name for name, _, _ in got]
        return got

    def broadcast(self, tensor: Any) -> Any:
        if self.member == 0:
            self.wire.q.put(tensor.clone())
            return tensor
        got = self.wire.q.get(timeout=60)
        name = self.wire._next_names.pop(0)
        if name == self.wire.corrupt:
            got.view(-1)[0] += 1e-4  # far below what the probe sees
        return tensor.copy_(got)


class CountdownEngine:
    """A scripted ``ContinuousEngine`` that owns its version: every ``advance`` gives each live request one token
    stamped with the version it holds; a request finishes after as many tokens as its prompt's one token id
    says; ``load_weights`` only moves the version (the trainer's hand-off)."""

    def __init__(self, version: int = 0) -> None:
        self.version = version
        self.left: dict[str, int] = {}
        self.sampled = 0  # tokens sampled so far, one per live request per advance

    def load_weights(self, named_tensors: object, *, version: int) -> None:
        self.version = version

    def submit(self, requests: list[Any]) -> None:
        for r in requests:
            self.left[r.id] = r.prompt_ids[0]

    def advance(self) -> list[Any]:
        from reasoning_rl.rollout import Delta

        out = []
        for rid in list(self.left):
            self.left[rid] -= 1
            done = self.left[rid] == 0
            out.append(Delta(rid, [7], [-0.5], "1", done, "stop" if done else "", version=self.version))
            if done:
                del self.left[rid]
        self.sampled += len(out)
        return out

    def abort(self, ids: list[str]) -> None:
        for rid in ids:
            self.left.pop(rid, None)

    def running(self) -> int:
        return len(self.left)

    def partial(self, ids: list[str]) -> list[Any]:
        return []  # every token went out with a delta


class WholeEngine(CountdownEngine):
    """``CountdownEngine`` whose requests report once, at their end, each token's version recorded as it was
    sampled (what ``Request(deltas=False)`` asks of vLLM); ``partial`` reads an unfinished one's tokens."""

    def __init__(self, version: int = 0) -> None:
        super().__init__(version)
        self.made: dict[str, list[int]] = {}  # request id -> its tokens' versions so far

    def advance(self) -> list[Any]:
        from dataclasses import replace

        out = []
        for d in super().advance():
            versions = self.made.setdefault(d.id, [])
            versions.append(d.version)
            if d.finished:
                del self.made[d.id]
                n = len(versions)
                out.append(
                    replace(d, token_ids=[7] * n, logprobs=[-0.5] * n, text="1" * n, versions=versions)
                )
        return out

    def partial(self, ids: list[str]) -> list[Any]:
        from reasoning_rl.rollout import Delta

        got = [(r, self.made[r]) for r in ids if self.made.get(r)]
        return [
            Delta(r, [7] * len(v), [-0.5] * len(v), "1" * len(v), False, "", version=v[-1], versions=v)
            for r, v in got
        ]


def scripted_frontier(
    engine: Any,
    pool: Any,
    rows: list[list[int]],
    *,
    n: int = 1,
    batch: int = 1,
    max_lag: int = 1,
    running_groups: int | None = None,
    rejection: Any = None,
    resident: bool = True,
) -> Any:
    """A real ``Frontier`` over prompts whose token ids are ``rows`` (a scripted engine reads them: the first is
    the length ``CountdownEngine`` generates), ``n`` samples a group, ``running_groups`` generating (None: the
    batch); ``rejection`` is an optional ``RejectAndAdmit``; ``resident=False`` parks and resubmits. One builder
    for every test that drives a frontier with a scripted engine."""
    from reasoning_rl.config import GradingConfig
    from reasoning_rl.data import Example, Prompt, PromptSampler
    from reasoning_rl.rollout import SamplingConfig
    from reasoning_rl.trainer.collect import RewardPlan
    from reasoning_rl.trainer.frontier import Frontier

    messages = ({"role": "user", "content": "q"},)
    prompts = [
        Prompt(
            Example(uid=f"p{k}", data_source="s", messages=messages, ground_truth="1", grader="math"), list(r)
        )
        for k, r in enumerate(rows)
    ]
    return Frontier(
        engine,
        pool,
        prompts,
        RewardPlan(GradingConfig()),
        PromptSampler(size=len(rows), seed=0, shuffle=False),
        batch=batch,
        max_lag=max_lag,
        running_groups=running_groups,
        sampling=lambda seed: SamplingConfig(n=n, max_tokens=8, stop=["\n"]),
        seed_for_step=lambda step: step,
        tokenizer=None,
        resident=resident,
        rejection=rejection,
    )
