"""On-disk grade cache (SQLite, WAL) so re-grading and resumed runs skip work already judged.

Only judgements are cached: ``error`` grades (timeouts, crashes, sandbox failures) are not, so a later run
gets another chance at them.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from graders.types import Grade

_FLUSH_EVERY = 256
_FLUSH_AFTER_S = 1.0


class GradeCache:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS grades (key TEXT PRIMARY KEY, grade TEXT NOT NULL)")
        self._lock = threading.Lock()
        self._unflushed: dict[str, str] = {}
        self._last_flush = time.monotonic()

    def get(self, key: str) -> Grade | None:
        with self._lock:
            text = self._unflushed.get(key)
            if text is None:
                row = self._db.execute("SELECT grade FROM grades WHERE key = ?", (key,)).fetchone()
                text = row[0] if row else None
        return Grade.from_dict(json.loads(text)) if text is not None else None

    def put(self, key: str, grade: dict[str, Any]) -> None:
        if grade["verdict"] == "error":
            return
        with self._lock:
            self._unflushed[key] = json.dumps(grade, default=repr)
            if len(self._unflushed) >= _FLUSH_EVERY or time.monotonic() - self._last_flush > _FLUSH_AFTER_S:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._unflushed:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO grades VALUES (?, ?)", self._unflushed.items())
            self._db.execute("COMMIT")
            self._unflushed.clear()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._db.close()
