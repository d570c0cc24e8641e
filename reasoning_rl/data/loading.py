"""Read dataset sources (JSONL, parquet, HF dataset dirs, hub names, generators) into validated examples.

Everything is read and validated before training starts, so a bad row stops the run at once with its
file and row number (or is skipped and counted when ``data.on_bad_row=skip``), never halfway through.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graders import UntrustedJSONError, loads_untrusted
from graders.gsm8k_rows import gsm8k_note
from reasoning_rl.config import DataConfig, SourceConfig
from reasoning_rl.data.generators import GENERATORS
from reasoning_rl.data.schema import DataError, Example, normalize_row


@dataclass
class LoadReport:
    """What loading saw: rows kept per source and skipped rows with their reasons."""

    kept: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    # rows per source whose gold was a GSM8K worked solution (graded against its final number)
    gsm8k: dict[str, int] = field(default_factory=dict)

    def notes(self) -> list[str]:
        """The lines worth telling the user about what loading did to the rows (at most one)."""
        if not self.gsm8k:
            return []
        where = ", ".join(f"{k}: {v}" for k, v in self.gsm8k.items())
        return [gsm8k_note(f"data: {sum(self.gsm8k.values())} rows ({where})")]


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:row {lineno}"
            try:
                yield where, loads_untrusted(line)
            except UntrustedJSONError as exc:  # not JSON, nested too deep, an over-long integer
                yield where, DataError(f"{where} {exc}")


def _hf_rows(ds: Any, label: str) -> Iterator[tuple[str, Any]]:
    for i, row in enumerate(ds, 1):
        yield f"{label}:row {i}", row


def _open_hf(source: SourceConfig) -> tuple[Any, str]:
    """A ``datasets.Dataset`` for parquet files, saved dataset dirs, data dirs or hub names."""
    # importlib: the repo's own `datasets/` data folder would shadow HF `datasets` for type checkers.
    datasets: Any = importlib.import_module("datasets")
    path = Path(source.path or "")
    try:
        if path.is_file() and path.suffix == ".parquet":
            if _parquet_rows(path) == 0:  # datasets raises a 75-line DatasetGenerationError for it
                raise DataError(f"dataset {source.path!r} has no usable rows (the parquet file has 0 rows)")
            return datasets.load_dataset("parquet", data_files=str(path), split="train"), str(path)
        if path.is_dir():
            if (
                (path / "dataset_info.json").exists()
                or (path / "state.json").exists()
                or (path / "dataset_dict.json").exists()
            ):
                loaded = datasets.load_from_disk(str(path))
                if isinstance(loaded, datasets.DatasetDict):
                    if source.split not in loaded:
                        raise DataError(f"{path}: no split {source.split!r}; splits: {', '.join(loaded)}")
                    loaded = loaded[source.split]
                return loaded, str(path)
            return datasets.load_dataset(str(path), split=source.split), str(path)
        if path.exists():
            raise DataError(
                f"{path}: unsupported file type (use .jsonl, .json lines, .parquet or a dataset dir)"
            )
        return datasets.load_dataset(source.path, split=source.split), str(source.path)
    except DataError:
        raise
    except FileNotFoundError as exc:
        raise DataError(f"dataset {source.path!r} not found: {exc}") from None
    except (ValueError, OSError, ConnectionError) as exc:
        raise DataError(f"dataset {source.path!r} could not be loaded: {exc}") from None


def _parquet_rows(path: Path) -> int:
    """The row count in a parquet file's footer (without reading any row)."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except (pyarrow.ArrowException, OSError) as exc:
        raise DataError(f"dataset {str(path)!r} is not a readable parquet file: {exc}") from None


def read_source(source: SourceConfig, seed: int) -> tuple[Iterator[tuple[str, Any]], str]:
    """(iterator of (where, raw row or DataError), default data_source name)."""
    if source.generator is not None:
        try:
            rows = GENERATORS[source.generator](source.size, seed, **source.options)
        except TypeError as exc:
            raise DataError(f"generator {source.generator!r}: bad options {source.options}: {exc}") from None
        label = f"generator:{source.generator}"
        return (
            (f"{label}:row {i}", r) for i, r in enumerate(rows, 1)
        ), source.data_source or source.generator
    path = Path(source.path or "")
    default = source.data_source or (path.stem if path.exists() else str(source.path))
    if path.is_file() and path.suffix in (".jsonl", ".json", ".ndjson"):
        return _jsonl_rows(path), default
    looks_local = path.suffix in (".jsonl", ".json", ".ndjson", ".parquet") or str(source.path).startswith(
        (".", "/")
    )
    if looks_local and not path.exists():
        raise DataError(f"dataset file {source.path} does not exist")
    ds, label = _open_hf(source)
    return _hf_rows(ds, label), default


def _check_routed_graders(data: DataConfig, known: frozenset[str]) -> None:
    """A config-wide grader name that is not installed is one mistake, not a bad row per row (which
    ``on_bad_row=skip`` would count away until only "no usable rows" is left)."""
    routed = [("data.default_grader", data.default_grader)] + [
        (f"data.grader_map.{k}", v) for k, v in data.grader_map.items()
    ]
    for key, name in routed:
        if ":" not in name and name not in known:
            raise DataError(
                f"{key}={name!r} is not an installed grader; available: {', '.join(sorted(known))}"
            )


def load_examples(
    sources: list[SourceConfig],
    data: DataConfig,
    *,
    seed: int,
    known_graders: frozenset[str] | None = None,
    report: LoadReport | None = None,
) -> list[Example]:
    """Read and validate every row of ``sources``; bad rows raise (or are skipped and counted)."""
    if known_graders is not None:
        _check_routed_graders(data, known_graders)
    report = report if report is not None else LoadReport()
    examples: list[Example] = []
    for s_idx, source in enumerate(sources):
        rows, default_source = read_source(source, seed)
        kept = 0

        def count_gsm8k(name: str = default_source) -> None:
            report.gsm8k[name] = report.gsm8k.get(name, 0) + 1

        for where, raw in rows:
            if source.limit is not None and kept >= source.limit:
                break
            try:
                if isinstance(raw, DataError):
                    raise raw
                row: Mapping[str, Any] = raw
                uid = str(row.get("id", f"{s_idx}:{kept}")) if isinstance(row, Mapping) else ""
                examples.append(
                    normalize_row(
                        row,
                        where=where,
                        uid=uid,
                        default_source=default_source,
                        rules=data,
                        known_graders=known_graders,
                        on_gsm8k=count_gsm8k,
                    )
                )
                kept += 1
            except DataError as exc:
                if data.on_bad_row == "error":
                    raise DataError(
                        f"{exc}\n(set data.on_bad_row=skip to skip malformed rows and count them)"
                    ) from None
                report.skipped.append(str(exc))
        report.kept[default_source] = report.kept.get(default_source, 0) + kept
        if kept == 0:
            raise DataError(f"dataset {source.path or source.generator!r} has no usable rows")
    return examples
