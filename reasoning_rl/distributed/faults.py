"""Bounded waits on the driver's calls to rank actors: a rank that dies or hangs stops the run with a
``WorkerFailure`` naming the rank, its node and the run's last good checkpoint, instead of a hang.

``gather(refs, places, what=, timeout_s=, checkpoints=)`` waits for one object ref per rank until a deadline
(``resources.collective_timeout_s``). It stops at the first failure: an actor that died (``RayActorError`` /
``ActorDiedError``: SIGKILL, OOM, a lost node), a call that raised, or the deadline. The message describes every
rank that did not answer well; the *named* rank (``WorkerFailure.rank``) is the most likely cause: a dead rank,
else a rank still silent when another's collective timed out or the deadline passed (the one stuck outside the
collective), else the rank that raised.

Public names (stable): ``RankPlace``, ``WorkerFailure``, ``gather``, ``last_good_checkpoint``, ``RESUME_HINT``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESUME_HINT = "trainer.resume=auto"
_TIMEOUT_WORDS = ("timed out", "timeout", "deadline")


@dataclass(frozen=True)
class RankPlace:
    """Where one rank runs: its node (IP and Ray node id) and its process id."""

    rank: int
    ip: str
    node_id: str
    pid: int

    def describe(self) -> str:
        return f"rank {self.rank} (node {self.ip}, id {self.node_id[:12]}, pid {self.pid})"


class WorkerFailure(RuntimeError):
    """A rank died, hung or raised; the run stops. The message says which and how to continue."""

    def __init__(self, message: str, *, rank: int, place: RankPlace | None, checkpoint: Path | None) -> None:
        super().__init__(message)
        self.rank = rank
        self.place = place
        self.checkpoint = checkpoint


def last_good_checkpoint(checkpoints: Path | None) -> Path | None:
    """The newest complete checkpoint under the run's ``checkpoints`` dir (None: none yet)."""
    if checkpoints is None or not checkpoints.is_dir():
        return None
    from reasoning_rl.checkpoint import CheckpointManager

    latest = CheckpointManager(checkpoints).latest()
    return latest.path if latest else None


@dataclass
class _Outcome:
    died: dict[int, str]
    raised: dict[int, str]
    silent: list[int]


def _place(places: Sequence[RankPlace], rank: int) -> RankPlace | None:
    return next((p for p in places if p.rank == rank), None)


def _who(places: Sequence[RankPlace], rank: int) -> str:
    p = _place(places, rank)
    return p.describe() if p else f"rank {rank}"


def _first_line(exc: BaseException) -> str:
    """The root cause's one line: a RayTaskError wraps the worker's exception (``cause``) and a traceback."""
    cause = getattr(exc, "cause", None)
    root = cause if isinstance(cause, BaseException) else exc
    text = str(root).strip().splitlines()
    return f"{type(root).__name__}: {text[0] if text else ''}".strip()


def _fail(
    out: _Outcome, places: Sequence[RankPlace], what: str, timeout_s: float, checkpoints: Path | None
) -> WorkerFailure:
    timed_out = any(w in msg.lower() for msg in out.raised.values() for w in _TIMEOUT_WORDS)
    if out.died:
        rank = min(out.died)
    elif out.silent and (timed_out or not out.raised):
        rank = out.silent[0]
    else:
        rank = min(out.raised)
    parts = [f"{_who(places, r)} died ({why})" for r, why in sorted(out.died.items())]
    parts += [f"{_who(places, r)} raised {why}" for r, why in sorted(out.raised.items())]
    if out.silent:
        late = ", ".join(_who(places, r) for r in out.silent)
        if out.died or out.raised:
            parts.append(f"still busy: {late}")
        else:
            parts.append(f"{late} did not answer within resources.collective_timeout_s={timeout_s:g} s")
    ckpt = last_good_checkpoint(checkpoints)
    resume = (
        f"last good checkpoint: {ckpt}; continue from it with {RESUME_HINT}"
        if ckpt
        else f"no checkpoint yet; {RESUME_HINT} starts the run again"
    )
    message = f"worker failure in {what}: rank {rank} stopped the run: " + "; ".join(parts) + f"; {resume}"
    return WorkerFailure(message, rank=rank, place=_place(places, rank), checkpoint=ckpt)


def _collect(ref: Any, rank: int, out: _Outcome) -> Any:
    """``ray.get`` of a finished ref; a death or an exception lands in ``out``."""
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    try:
        return ray.get(ref)
    except RayActorError as exc:  # ActorDiedError, ActorUnavailableError: the process is gone
        out.died[rank] = _first_line(exc).split(". ")[0][:200]
    except RayTaskError as exc:
        out.raised[rank] = _first_line(exc)[:300]
    return None


def _wait_first(refs: list[Any], timeout_s: float) -> tuple[list[Any], list[Any]]:
    """``ray.wait`` for the first of ``refs`` (done, not done), held to the whole ``timeout_s``: ray.wait may
    return a hair before its timeout (CI: 1.99991 s of 2), which must not read as a hang."""
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        done, rest = ray.wait(refs, num_returns=1, timeout=max(deadline - time.monotonic(), 0.0))
        if done or time.monotonic() >= deadline:
            return done, rest


def gather(
    refs: Sequence[Any],
    places: Sequence[RankPlace],
    *,
    what: str,
    timeout_s: float,
    checkpoints: Path | None = None,
    first_rank: int = 0,
) -> list[Any]:
    """The values of ``refs`` (ref r from rank ``first_rank + r``) in rank order, or ``WorkerFailure`` within
    ``timeout_s``."""
    import ray

    deadline = time.monotonic() + timeout_s
    rank_of = {ref: first_rank + r for r, ref in enumerate(refs)}
    values: list[Any] = [None] * len(refs)
    pending = list(refs)
    out = _Outcome({}, {}, [])
    while pending:
        left = deadline - time.monotonic()
        done, pending = _wait_first(pending, left) if left > 0 else ([], pending)
        if not done:
            out.silent = sorted(rank_of[ref] for ref in pending)
            raise _fail(out, places, what, timeout_s, checkpoints)
        for ref in done:
            values[rank_of[ref] - first_rank] = _collect(ref, rank_of[ref], out)
        if out.died or out.raised:
            more, pending = ray.wait(pending, num_returns=len(pending), timeout=0) if pending else ([], [])
            for ref in more:  # failures that landed at the same moment are part of the story
                _collect(ref, rank_of[ref], out)
            out.silent = sorted(rank_of[ref] for ref in pending)
            raise _fail(out, places, what, timeout_s, checkpoints)
    return values
