"""Sandboxes held by sessions (trajectories): a session's runs go to its own warm sandbox, whose supervisor does
not clean up between them, so the session's interpreter and files live on (no replay of earlier cells). At most
``limit`` are held; when more sessions want one, the least recently used is given back first (its next run gets
a clean sandbox and the fork server replays its history): a fallback the python tool never reaches, since it
admits at most ``limit`` sessions at a time (a live interpreter's ``os.urandom`` and clocks cannot be
replayed). Giving back always cleans: an
ordinary run, whose supervisor clean-up kills every process and wipes files and IPC, before anyone else gets it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

B = TypeVar("B")


class Held(Generic[B]):
    """Thread-safe map session -> held box; ``give_back`` cleans a box and returns it to its backend's pool."""

    def __init__(self, limit: int, give_back: Callable[[B], None]) -> None:
        if limit < 1:
            raise ValueError(f"the number of held sessions must be >= 1, got {limit}")
        self.limit, self._give_back = limit, give_back
        self._boxes: OrderedDict[str, B] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, session: str) -> B | None:
        """The session's box, removed while its run is in flight (a second concurrent run gets a new one)."""
        with self._lock:
            return self._boxes.pop(session, None)

    def make_room(self, free: int = 1) -> None:
        """Give back the least recently used boxes until ``free`` more could be held."""
        while True:
            with self._lock:
                if len(self._boxes) + free <= self.limit or not self._boxes:
                    return
                _, box = self._boxes.popitem(last=False)
            self._give_back(box)

    def keep(self, session: str, box: B) -> None:
        with self._lock:
            other = self._boxes.pop(session, None)
            self._boxes[session] = box
        if other is not None:
            self._give_back(other)
        self.make_room(0)

    def end(self, session: str) -> None:
        box = self.take(session)
        if box is not None:
            self._give_back(box)

    def close(self) -> list[B]:
        """Forget every held box; the caller removes them (closing needs no clean-up)."""
        with self._lock:
            boxes = list(self._boxes.values())
            self._boxes.clear()
        return boxes
