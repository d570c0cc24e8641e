"""Read evaluation rows from JSONL, parquet or a local Hugging Face dataset directory, one at a time.

Rows are numbered from 1 (for JSONL, the line number) so error lines point at what the user sees.
A line that is not a JSON object (or one past ``graders.untrusted_json``'s limits: nested deeper than
``MAX_DEPTH``, which JSON, pickle and the writer of OUTPUT would each fail on, or an over-long integer) is yielded as ``BadRow`` rather than raised: nothing is dropped.
JSONL may be gzipped (``.jsonl.gz``) and may start with a UTF-8 byte-order mark.
"""

from __future__ import annotations

import gzip
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from graders.untrusted_json import TOO_DEEP, UntrustedJSONError, loads_untrusted, too_deep


class InputError(ValueError):
    """The input as a whole cannot be read (missing file, unknown format, missing optional package)."""


@dataclass(frozen=True)
class BadRow:
    reason: str
    raw: str


Row = dict[str, Any]
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")


def _kind(path: Path) -> str:
    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists():
            return "hf"
        raise InputError(f"{path} is a directory but not a saved Hugging Face dataset (no dataset_info.json)")
    if not path.exists():
        raise InputError(f"input file {path} does not exist")
    if path.suffix == ".parquet":
        return "parquet"
    if path.suffix in JSONL_SUFFIXES:
        return "jsonl"
    if path.suffix == ".gz" and Path(path.stem).suffix in JSONL_SUFFIXES:
        return "jsonl.gz"
    raise InputError(
        f"cannot tell the format of {path}: use .jsonl (or .jsonl.gz), .parquet or a saved HF dataset directory"
    )


def _open_text(path: Path, kind: str) -> IO[str]:
    """JSONL as text; ``utf-8-sig`` drops a leading byte-order mark (Windows editors write one)."""
    if kind == "jsonl.gz":
        return gzip.open(path, "rt", encoding="utf-8-sig", errors="replace")
    return path.open(encoding="utf-8-sig", errors="replace")


def count_rows(path: Path, split: str | None = None) -> int:
    """Row count for the progress bar, without parsing rows."""
    kind = _kind(path)
    if kind in ("jsonl", "jsonl.gz"):
        try:
            with _open_text(path, kind) as fh:
                return sum(1 for line in fh if line.strip())
        except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
            raise InputError(f"cannot read {path}: {exc}") from exc
    if kind == "parquet":
        return int(_parquet(path).metadata.num_rows)
    return len(_load_hf(path, split))


def _parquet(path: Path) -> Any:
    """The open ``pyarrow.parquet.ParquetFile``; a file pyarrow cannot read (empty, cut off) is one line."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except (pyarrow.ArrowException, OSError) as exc:
        raise InputError(f"{path} is not a readable parquet file: {exc}") from exc


def read_rows(path: Path, split: str | None = None) -> Iterator[tuple[int, Row | BadRow]]:
    """(row number, row) pairs in input order; a row nested deeper than ``MAX_DEPTH`` is a ``BadRow``."""
    kind = _kind(path)
    if kind in ("jsonl", "jsonl.gz"):
        yield from _read_jsonl(path, kind)
        return
    rows = _read_parquet(path) if kind == "parquet" else enumerate(_load_hf(path, split), start=1)
    for number, row in rows:
        if too_deep(row):
            yield number, BadRow(f"{path.name} row {number} {TOO_DEEP}", repr(row)[:10000])
        else:
            yield number, dict(row)


def _read_parquet(path: Path) -> Iterator[tuple[int, Row]]:
    number = 0
    for batch in _parquet(path).iter_batches(batch_size=1024):
        for row in batch.to_pylist():
            number += 1
            yield number, row


def _read_jsonl(path: Path, kind: str) -> Iterator[tuple[int, Row | BadRow]]:
    with _open_text(path, kind) as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = loads_untrusted(line.rstrip("\r\n"))  # a cut-off row reads "Unterminated string"
            except UntrustedJSONError as exc:
                yield number, BadRow(f"{path.name} line {number} {exc}", line.rstrip("\n"))
                continue
            if not isinstance(row, dict):
                why = f"is a JSON {type(row).__name__}, not an object"
                yield number, BadRow(f"{path.name} line {number} {why}", line.rstrip("\n"))
                continue
            yield number, row


def _load_hf(path: Path, split: str | None) -> Any:
    needs = (
        f"{path} is a Hugging Face dataset directory; reading it needs the `datasets` package "
        "(pip install 'reasoning-rl[train]' or pip install datasets), or convert it to JSONL/parquet"
    )
    try:
        # By name: the repo's own datasets/ folder (data files) must not shadow Hugging Face's package for mypy.
        datasets: Any = importlib.import_module("datasets")
    except ImportError as exc:
        raise InputError(needs) from exc
    if not hasattr(datasets, "load_from_disk"):
        # Run from the repo root without HF datasets, `import datasets` finds the top-level datasets/ data folder
        # as an empty namespace package (no __file__, no load_from_disk): that is "not installed" too.
        where = ", ".join(str(p) for p in getattr(datasets, "__path__", [])) or "?"
        raise InputError(f"{needs} (`import datasets` found the folder {where}, not the package)")
    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        if split is None:
            if len(ds) != 1:
                raise InputError(f"{path} has splits {sorted(ds)}; choose one with --split")
            split = next(iter(ds))
        if split not in ds:
            raise InputError(f"{path} has no split {split!r}; it has {sorted(ds)}")
        return ds[split]
    return ds
