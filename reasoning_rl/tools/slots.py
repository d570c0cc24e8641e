"""Admission of trajectories to live interpreters: at most ``n`` sessions hold one at a time; a further session
waits (first come, first served) until a holder's session ends. Nothing is taken back from a live session, so a
trajectory's interpreter is never replaced by a replay while it is in flight. Waiters may sit on different
event loops (each ``asyncio.run`` of a caller); a slot is handed over thread-safely."""

from __future__ import annotations

import asyncio
import threading
from collections import deque


class Slots:
    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"the number of live interpreters must be >= 1, got {n}")
        self._free = n
        self._holders: set[str] = set()
        self._waiters: deque[tuple[str, asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self._lock = threading.Lock()

    def holds(self, session: str) -> bool:
        with self._lock:
            return session in self._holders

    async def enter(self, session: str) -> None:
        """Return once ``session`` holds a slot (at once when it already does)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if session in self._holders:
                return
            if self._free > 0 and not self._waiters:
                self._free -= 1
                self._holders.add(session)
                return
            waiter = loop.create_future()
            self._waiters.append((session, loop, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            with self._lock:  # still queued: leave the queue; granted meanwhile: ``leave`` frees it
                self._waiters = deque(w for w in self._waiters if w[2] is not waiter)
            raise

    def leave(self, session: str) -> None:
        """``session`` ended: its slot goes to the longest waiter whose loop still runs."""
        with self._lock:
            self._waiters = deque(w for w in self._waiters if w[0] != session)
            if session not in self._holders:
                return
            self._holders.discard(session)
            while self._waiters:
                heir, loop, waiter = self._waiters.popleft()
                try:
                    loop.call_soon_threadsafe(_grant, waiter)
                except RuntimeError:  # its loop is closed: nobody waits there any more
                    continue
                self._holders.add(heir)
                return
            self._free += 1


def _grant(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
