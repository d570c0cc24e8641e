"""``LiveEngine``: a split-placement rollout rank's continuous engine, decoding on its own (issue 31).

The driver's ``RemoteEngine`` submits requests and takes their deltas (``advance``). Between those calls (while
the trainer grades, updates and broadcasts the new weights) this rank's decode thread keeps stepping the
engine as long as requests are live, buffering each step's deltas (the engine stamps each with the policy
version whose weights produced them). New weights are swapped in under the engine lock between two decode steps
(``swap``): requests stay resident, their KV blocks kept as colocated continuous rollouts keep them, and continue
with the new weights; the engine's cache salt (the weights it holds) keeps new requests off blocks of older
weights.

``overlap=False`` (``rollout.overlap``, and every colocated rank and every run at ``rollout.max_lag = 0``) is
the paused mode: no thread, the engine steps once per driver ``advance`` and nowhere else, so a run over ranks is
the single-process continuous run step for step.

``LiveCalls`` is the rank side of those calls, one definition for both generating rank classes.

Public names (stable): ``LiveEngine``, ``LiveCalls``, ``Advanced``, ``WAIT_S``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TypeVar

from reasoning_rl.rollout import Completion, ContinuousEngine, Delta, Request, RolloutEngine, SamplingConfig

T = TypeVar("T")

WAIT_S = 0.05  # how long a driver's advance waits for a first delta while requests are live (overlap mode)


@dataclass(frozen=True)
class Advanced:
    """What one driver ``advance`` takes from a rank: the deltas decoded since the previous one, the engine's
    running batch now and its count of sampled tokens (``ContinuousEngine.sampled``: tokens of requests that
    report only at their end counted as they were sampled)."""

    deltas: list[Delta]
    running: int
    sampled: int


class LiveEngine:
    """The rank's engine behind one lock, stepped by its own thread (overlap) or by the driver (paused)."""

    def __init__(self, engine: ContinuousEngine, *, overlap: bool) -> None:
        self.engine = engine
        self.overlapped = 0  # tokens decoded between the driver's last advance and the last swap
        self._cond = threading.Condition()  # the engine lock: a step, submit, abort, generate, swap
        self._count = threading.Lock()  # guards _waiting
        self._waiting = 0  # callers queued for the engine lock: the decode thread lets them in first
        self._live: set[str] = set()
        self._buffer: list[Delta] = []
        self._filled = threading.Event()  # set while the buffer holds deltas the driver has not taken
        self._sampled_at_advance = 0  # the engine's ``sampled`` at the driver's last advance
        self._stop = False
        self._error: BaseException | None = None
        self._thread = (
            threading.Thread(target=self._decode, name="rrl-decode", daemon=True) if overlap else None
        )
        if self._thread is not None:
            self._thread.start()

    # ------------------------------------------------------------------------------ the driver's calls
    def submit(self, requests: list[Request]) -> None:
        with self.exclusive():
            self.engine.submit(requests)
            self._live.update(r.id for r in requests)

    def advance(self) -> Advanced:
        """Paused: one engine step. Overlap: every delta buffered since the last call, waiting up to ``WAIT_S``
        for one while requests are live."""
        if self._thread is not None and self._live:
            self._filled.wait(WAIT_S)  # outside the lock: the thread decodes meanwhile
        with self.exclusive():
            if self._thread is None:
                deltas = self._step() if self._live else []
            else:
                deltas, self._buffer = self._buffer, []
                self._filled.clear()
            self._sampled_at_advance = self.engine.sampled
            return Advanced(deltas, self.engine.running(), self._sampled_at_advance)

    def abort(self, ids: list[str]) -> None:
        with self.exclusive():
            self.engine.abort(ids)
            gone = set(ids)
            self._live -= gone
            self._buffer = [d for d in self._buffer if d.id not in gone]

    def partial(self, ids: list[str]) -> list[Delta]:
        """What these unfinished requests have so far (``ContinuousEngine.partial``), between two decode steps."""
        with self.exclusive():
            return self.engine.partial(ids)

    @property
    def version(self) -> int:
        """The policy version the engine holds (its own record; a swap changes it under the engine lock)."""
        return self.engine.version

    def swap(self, load: Callable[[], T]) -> T:
        """Run ``load`` (the new weights into the engine, which records their version, then the freshness
        gate) between two decode steps. Records the tokens the overlap decoded meanwhile."""
        with self.exclusive():
            self.overlapped = self.engine.sampled - self._sampled_at_advance
            return load()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """The engine lock, taken ahead of the decode thread's next step (other uses of the engine, such as an
        eval wave, run inside it)."""
        with self._count:
            self._waiting += 1
        try:
            self._cond.acquire()
        finally:
            with self._count:
                self._waiting -= 1
        try:
            self._raise()
            yield
        finally:
            self._cond.notify_all()
            self._cond.release()

    def close(self) -> None:
        """Stop the decode thread (after its current step)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    # ------------------------------------------------------------------------------------ decoding
    def _step(self) -> list[Delta]:
        """One engine step (engine lock held); the engine stamps each delta with the version that produced it."""
        deltas = self.engine.advance()
        for d in deltas:
            if d.finished:
                self._live.discard(d.id)
        return deltas

    def _decode(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._stop and (self._waiting or not self._live):
                        self._cond.wait(WAIT_S)  # a caller queueing for the lock does not notify
                    if self._stop:
                        return
                    self._buffer += self._step()
                    if self._buffer:
                        self._filled.set()
        except BaseException as exc:  # kept, and raised in the driver's next call to this rank
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the rollout rank's decode thread failed: {self._error!r}") from self._error


class LiveCalls:
    """A generating rank's engine calls (``EngineRank``'s ``generate``, ``continuous`` and ``live_*``) over its
    ``live_engine``: None when the engine only streams (a plugin engine) or the rank has none."""

    live_engine: LiveEngine | None

    def _engine(self) -> RolloutEngine:
        """The rank's engine (a rank without one raises)."""
        raise NotImplementedError

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        """Under the engine lock when live: a decode thread waits, resident requests keep their outputs."""
        if not prompts:
            return []
        with self.live_engine.exclusive() if self.live_engine is not None else nullcontext():
            return self._engine().generate(prompts, sampling)

    def continuous(self) -> bool:
        return self.live_engine is not None

    def live_submit(self, requests: list[Request]) -> None:
        self._live().submit(requests)

    def live_advance(self) -> Advanced:
        return self._live().advance()

    def live_abort(self, ids: list[str]) -> None:
        self._live().abort(ids)

    def live_partial(self, ids: list[str]) -> list[Delta]:
        return self._live().partial(ids)

    def _live(self) -> LiveEngine:
        if self.live_engine is None:
            raise RuntimeError("continuous rollout calls on a rank whose engine only streams")
        return self.live_engine
