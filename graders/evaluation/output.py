"""The OUTPUT JSONL: resume bookkeeping and crash-safe appends."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any


class OutputError(ValueError):
    """OUTPUT exists but cannot be resumed into."""


def done_rows(path: Path) -> set[int]:
    """Row numbers already in OUTPUT. A torn last line (the process died mid-write) is cut off."""
    done: set[int] = set()
    if not path.exists():
        return done
    good_end = 0
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                break  # torn final line: dropped below, its row is graded again
            if raw.strip():
                try:
                    row = json.loads(raw)["row"]
                    if isinstance(row, bool) or not isinstance(row, int):
                        raise ValueError(f"field `row` is {row!r:.100}, not a row number")
                    done.add(row)
                except (KeyError, TypeError, ValueError, RecursionError) as exc:  # JSONDecodeError too
                    raise OutputError(
                        f"{path} line {number} is not an rrl grade result ({exc}); refusing to resume into it"
                    ) from exc
            good_end += len(raw)
    if good_end != path.stat().st_size:
        with path.open("r+b") as fh:
            fh.truncate(good_end)
    return done


def write_line(fh: IO[bytes], line: dict[str, Any]) -> None:
    """One JSON object per line, flushed, so Ctrl-C or a crash never loses a finished row.

    Text is written as UTF-8; a line holding a lone surrogate (``"\\ud83d"`` in the input JSON decodes to one,
    and UTF-8 cannot encode it) is written with JSON escapes instead, which reads back to the same string.
    """
    try:
        data = json.dumps(line, ensure_ascii=False, default=repr).encode("utf-8")
    except UnicodeEncodeError:
        data = json.dumps(line, ensure_ascii=True, default=repr).encode("ascii")
    fh.write(data + b"\n")
    fh.flush()


def sort_output(path: Path) -> None:
    """Rewrite a finished OUTPUT in input order (rows are appended as they finish, and a resumed run appends
    after the rows it kept): one line per row, sorted by ``row``, replaced atomically."""
    if not path.exists():
        return
    with path.open("rb") as fh:
        lines = [raw for raw in fh if raw.strip()]
    numbers = [int(json.loads(raw)["row"]) for raw in lines]
    if numbers == sorted(numbers):
        return
    tmp = path.with_name(path.name + ".sorting")
    with tmp.open("wb") as fh:
        for _, raw in sorted(zip(numbers, lines, strict=True), key=lambda pair: pair[0]):
            fh.write(raw)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)
