"""A thread-safe pool of warm sandboxes keyed by their start-time spec; at most ``size`` exist at once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)


class Pool:
    """Idle sandboxes are reused; unhealthy ones are removed and replaced in the background."""

    def __init__(self, start: Callable[[Any], Any], remove: Callable[[Any], None], size: int) -> None:
        if size < 1:
            raise ValueError(f"pool_size must be >= 1, got {size}")
        self._start, self._remove, self.size = start, remove, size
        self._idle: dict[Hashable, list[Any]] = {}
        self._total = 0
        self._closed = False
        self._cond = threading.Condition()

    def prestart(self, spec: Hashable) -> None:
        """Start ``size`` sandboxes for ``spec`` now, in parallel, so the first runs are warm."""
        with self._cond:
            n = self.size - self._total
            self._total += n
        with ThreadPoolExecutor(max(n, 1)) as ex:
            for fut in [ex.submit(self._start, spec) for _ in range(n)]:
                try:
                    self._put_idle(spec, fut.result())
                except Exception as exc:  # noqa: BLE001 - acquire() retries and reports the failure
                    self._forget(f"prestart failed: {exc}")

    def acquire(self, spec: Hashable) -> Any:
        evict = None
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("sandbox pool is closed")
                if self._idle.get(spec):
                    return self._idle[spec].pop()
                if self._total < self.size:
                    self._total += 1
                    break
                other = next((k for k, v in self._idle.items() if v), None)
                if other is not None:  # make room: an idle sandbox of another spec gives way
                    evict = self._idle[other].pop()
                    break
                self._cond.wait()
        if evict is not None:
            self._remove(evict)
        try:
            return self._start(spec)
        except BaseException:
            self._forget("start failed")
            raise

    def release(self, spec: Hashable, sandbox: Any, healthy: bool) -> None:
        with self._cond:
            if healthy and not self._closed:
                self._idle.setdefault(spec, []).append(sandbox)
                self._cond.notify()
                return
        self._remove(sandbox)
        self._forget("unhealthy sandbox replaced" if not self._closed else "closed")
        if not self._closed:
            threading.Thread(target=self._replace, args=(spec,), daemon=True).start()

    def _replace(self, spec: Hashable) -> None:
        with self._cond:
            if self._closed or self._total >= self.size:
                return
            self._total += 1
        try:
            self._put_idle(spec, self._start(spec))
        except Exception as exc:  # noqa: BLE001 - the next acquire() starts one and reports errors itself
            self._forget(f"replacement failed: {exc}")

    def _put_idle(self, spec: Hashable, sandbox: Any) -> None:
        with self._cond:
            if not self._closed:
                self._idle.setdefault(spec, []).append(sandbox)
                self._cond.notify()
                return
            self._total -= 1
        self._remove(sandbox)

    def _forget(self, why: str) -> None:
        log.debug("pool slot freed: %s", why)
        with self._cond:
            self._total -= 1
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle = [s for v in self._idle.values() for s in v]
            self._idle.clear()
            self._total -= len(idle)
            self._cond.notify_all()
        for sandbox in idle:
            self._remove(sandbox)
