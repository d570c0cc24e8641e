"""The run record next to OUTPUT (``OUTPUT.run.json``): what produced its rows, so a resume never mixes runs.

Resuming skips rows by number, which is only right when the rows come from the same input, graders and
options. The record holds a fingerprint of the input (path, size, modification time; for a Hugging Face
directory every file's), the routing (``--grader``, ``--source-grader``), the options, and each grader used
so far (name, declared version, source hash). It is written before the first row and whenever a new grader
is first used (before any of its rows), atomically, so a run killed at any point leaves a record that covers
every row in OUTPUT. A resume whose fingerprint differs is refused with the differences listed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from graders.evaluation.output import OutputError
from graders.runtime import resolve_grader
from graders.runtime.cache import source_fingerprint
from graders.types import Grader

FORMAT = 1


def record_path(output: Path) -> Path:
    return output.with_name(output.name + ".run.json")


def input_fingerprint(path: Path, split: str | None) -> dict[str, Any]:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {
        "path": str(path.resolve()),
        "split": split,
        "files": {str(f.relative_to(path)) if path.is_dir() else f.name: _stat(f) for f in files},
    }


def _stat(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def grader_identity(grader: Grader) -> dict[str, str]:
    return {"name": str(grader.name), "version": str(grader.version), "source": source_fingerprint(grader)}


class RunRecord:
    """The record of the run writing OUTPUT; ``use`` adds a grader the first time a row needs it."""

    def __init__(self, output: Path, run: dict[str, Any]) -> None:
        self.path = record_path(output)
        self.data: dict[str, Any] = {"format": FORMAT, **run, "graders": {}}

    def use(self, spec: str, grader: Grader) -> None:
        if spec not in self.data["graders"]:
            self.data["graders"][spec] = grader_identity(grader)
            self.save()

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True, ensure_ascii=True) + "\n")
        os.replace(tmp, self.path)

    def check_resume(self, output: Path, rows_done: int) -> None:
        """Refuse to resume into OUTPUT when its rows came from another input, routing, options or graders."""
        if not self.path.exists():
            raise OutputError(
                f"{output} already has {rows_done} rows but no run record {self.path.name} (written by an older "
                "rrl grade, or deleted), so nothing shows they came from this input, graders and options; "
                "pass --overwrite to grade from scratch, or write to another -o"
            )
        try:
            old = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise OutputError(
                f"{self.path} is unreadable ({exc}); pass --overwrite to grade from scratch"
            ) from exc
        changes = [
            f"{key}: {_short(old.get(key))} -> {_short(self.data.get(key))}"
            for key in ("input", "routing", "options", "grader_options")
            if _canon(old.get(key)) != _canon(self.data.get(key))
        ]
        for spec, before in sorted((old.get("graders") or {}).items()):
            try:
                now = grader_identity(resolve_grader(spec))
            except Exception as exc:  # a grader that no longer loads is a changed grader
                changes.append(f"grader {spec!r}: {_short(before)} -> cannot be loaded ({exc})")
                continue
            if now != before:
                changes.append(f"grader {spec!r}: {_short(before)} -> {_short(now)}")
            self.data["graders"][spec] = now
        if changes:
            raise OutputError(
                f"{output} holds {rows_done} rows of a different run, so resuming would mix results: "
                + "; ".join(changes)
                + ". Pass --overwrite to grade from scratch, or write to another -o"
            )


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, default=repr)


def _short(value: Any, limit: int = 300) -> str:
    text = _canon(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
