"""On-disk grade cache (SQLite, WAL) so re-grading and resumed runs skip work already judged.

Only judgements are cached: ``error`` grades (timeouts, crashes, sandbox failures) are not, so a later run
gets another chance at them. A grade's key covers the grader's name, its declared ``version`` and a hash of
its source code (``cache_version``), so editing a grader without bumping its version never replays grades
of the old code.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import threading
import time
from functools import cache
from pathlib import Path
from typing import Any

from graders.types import Grade

_FLUSH_EVERY = 256
_FLUSH_AFTER_S = 1.0


@cache
def _source_hash(module_file: str, whole_package: bool) -> str:
    root = Path(module_file).parent if whole_package else Path(module_file)
    files = sorted(root.rglob("*.py")) if whole_package else [root]
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(root.parent)).encode("utf-8", "surrogatepass") + b"\0")
        digest.update(file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def source_fingerprint(grader: object) -> str:
    """Hash of the source that defines ``grader``'s class: every ``.py`` file of its package (recursively), or
    its module file when the module is top-level. Code outside that package, data files and external tools
    are not covered: a grader depending on them must bump ``version`` when they change. A grader naming another
    module in ``source_module`` (the function adapter: the wrapped function's module) has that module's source
    hashed the same way, after its own."""
    own = _module_fingerprint(type(grader).__module__)
    other = getattr(grader, "source_module", None)
    if not isinstance(other, str) or other == type(grader).__module__:
        return own
    return f"{own}.{_module_fingerprint(other)}"


def _module_fingerprint(name: str) -> str:
    module = sys.modules.get(name)
    module_file = getattr(module, "__file__", None)
    if module is None or not module_file or not Path(module_file).is_file():
        return "nosource"
    return _source_hash(module_file, bool(module.__package__))


def cache_version(grader: Any) -> str:
    """The version that enters cache keys: the declared one plus the source fingerprint."""
    return f"{grader.version}+src.{source_fingerprint(grader)}"


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
