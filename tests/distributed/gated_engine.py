"""``rollout.engine=gated_vllm``: the vLLM engine made to overlap by construction, for the overlapped split test
(issue 41: no assert may depend on how a loaded runner schedules the rollout rank's decode thread).

Registered through the ``reasoning_rl.engines`` entry-point group (the test writes a ``.dist-info`` naming it on
the run's ``PYTHONPATH``), so the driver's config check and the Ray rollout rank both find it. On top of vLLM:

- one group at a time: requests wait in a FIFO and enter vLLM ``SLOTS`` at a time (one group of ``n = SLOTS``),
  so groups finish in admission order and, with ``rollout.ignore_eos``, each after exactly ``max_tokens``
  steps: when the driver has the ``B`` oldest groups finished, every younger one is still unfinished;
- lock-step with the driver: after a step with requests in vLLM, further steps do nothing until the driver's
  next ``LiveEngine.advance`` (the only caller of ``running()`` on a rollout rank), so the decode thread
  cannot finish the younger groups while the driver grades (a step counts whether or not it returned deltas:
  the frontier's requests report only when they finish);
- ``wake()`` (which ``receive_weights`` calls first, outside the engine lock, before the swap) waits until a
  step ran after the driver's last advance while requests are unfinished: the decode thread
  decoded during the update. If it never does (overlap broken: no thread, or one that stops for updates),
  ``wake`` raises after ``HANG_S`` and the run fails, naming why.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from reasoning_rl.registry import ENGINES
from reasoning_rl.rollout import Delta, Request

SLOTS = 4  # requests in vLLM at once: one group of the test's rollout.n
HANG_S = 600.0  # wake's hang guard: far beyond one decode step on any runner
IDLE_S = 0.001  # a throttled step sleeps this long instead of spinning (not a correctness bound)


class GatedEngine:
    """The vLLM engine behind a FIFO of ``SLOTS`` and a one-step-per-driver-advance throttle."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._queue: deque[Request] = deque()  # submitted, not yet in vLLM
        self._inside: set[str] = set()  # in vLLM, unfinished
        self._fresh = 0  # steps with requests in vLLM since the driver's last advance
        self._cond = threading.Condition()

    def __getattr__(self, name: str) -> Any:
        """Everything else (generate, load_weights, version, fingerprints, ...) is vLLM's own."""
        return getattr(self.inner, name)

    @property
    def version(self) -> int:
        return int(self.inner.version)

    def submit(self, requests: list[Request]) -> None:
        with self._cond:
            self._queue.extend(requests)

    def advance(self) -> list[Delta]:
        with self._cond:
            if self._fresh:
                throttled = True
            else:
                throttled = False
                room = SLOTS - len(self._inside)
                entering = [self._queue.popleft() for _ in range(min(room, len(self._queue)))]
        if throttled:
            time.sleep(IDLE_S)
            return []
        if entering:
            self.inner.submit(entering)
            with self._cond:
                self._inside.update(r.id for r in entering)
        deltas: list[Delta] = self.inner.advance()
        with self._cond:
            self._fresh += 1 if self._inside else 0
            for d in deltas:
                if d.finished:
                    self._inside.discard(d.id)
            self._cond.notify_all()
        return deltas

    def abort(self, ids: list[str]) -> None:
        gone = set(ids)
        with self._cond:
            self._queue = deque(r for r in self._queue if r.id not in gone)
            inside = sorted(gone & self._inside)
            self._inside -= gone
        if inside:
            self.inner.abort(inside)

    def partial(self, ids: list[str]) -> list[Delta]:
        with self._cond:
            inside = [i for i in ids if i in self._inside]
        return self.inner.partial(inside) if inside else []

    def running(self) -> int:
        """vLLM's running batch; called by the driver's advance only, so it also lifts the throttle."""
        with self._cond:
            self._fresh = 0
        return int(self.inner.running())

    def wake(self) -> None:
        with self._cond:
            stepped = self._cond.wait_for(
                lambda: self._fresh > 0 or not (self._queue or self._inside), timeout=HANG_S
            )
        if not stepped:
            raise RuntimeError(
                f"gated_vllm: no decode step in {HANG_S:.0f} s after the driver's last advance with requests "
                "unfinished: the rollout rank did not decode during the update"
            )
        self.inner.wake()


def make(model_path: str, **kw: Any) -> GatedEngine:
    """The entry point: the vLLM engine (its own factory), wrapped; the FIFO keeps its running batch at
    ``SLOTS``."""
    return GatedEngine(ENGINES.get("vllm")(model_path, **kw))
