"""Which of a step's samples people see (TensorBoard text, the W&B table, ``rrl report``), and how they read.

One row per sample as ``RUN_DIR/samples/step_N.jsonl`` stores it (prompt messages, response, ground truth,
score, verdict, reason). The picks are the step's best, worst and errored samples in turn, so a handful shows
what was rewarded, what was not and what the graders could not judge.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLUMNS = ("kind", "data_source", "prompt", "response", "ground_truth", "verdict", "score", "reason")
MAX_CHARS = 2000  # per cell: a long response stays readable and the event files small


def prompt_text(prompt: Any) -> str:
    """The prompt as text: the chat messages' contents (the last user turn last), or the string itself."""
    if isinstance(prompt, list):
        return "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
    return "" if prompt is None else str(prompt)


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return (
        text if len(text) <= MAX_CHARS else text[:MAX_CHARS] + f"… ({len(text) - MAX_CHARS} more characters)"
    )


def pick(rows: Sequence[dict[str, Any]], n: int) -> list[tuple[str, dict[str, Any]]]:
    """Up to ``n`` (kind, row) pairs: best, worst and errored in turn, each sample at most once."""
    judged = [r for r in rows if r.get("verdict") != "error"]
    by_score = sorted(judged, key=lambda r: -float(r.get("score") or 0.0))
    queues: dict[str, list[dict[str, Any]]] = {
        "best": by_score,
        "worst": by_score[::-1],
        "errored": [r for r in rows if r.get("verdict") == "error"],
    }
    seen: set[int] = set()
    out: list[tuple[str, dict[str, Any]]] = []
    while len(out) < n and any(queues.values()):
        for kind, queue in queues.items():
            while queue and id(queue[0]) in seen:
                queue.pop(0)
            if queue and len(out) < n:
                row = queue.pop(0)
                seen.add(id(row))
                out.append((kind, row))
    return out


def cells(kind: str, row: dict[str, Any]) -> list[str]:
    """One picked sample as strings in ``COLUMNS`` order."""
    values = {
        "kind": kind,
        "prompt": prompt_text(row.get("prompt")),
        **{k: row.get(k) for k in COLUMNS[1:] if k != "prompt"},
    }
    return [_cell("" if values.get(c) is None else values[c]) for c in COLUMNS]


def markdown(picked: list[tuple[str, dict[str, Any]]]) -> str:
    """A Markdown table (TensorBoard's text plugin renders it); pipes and line breaks escaped per cell."""

    def esc(text: str) -> str:
        return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")

    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    return head + "".join("| " + " | ".join(esc(c) for c in cells(k, r)) + " |\n" for k, r in picked)


def read_step_files(run_dir: Path) -> dict[int, list[dict[str, Any]]]:
    """``samples/step_N.jsonl`` of a run by step (a torn last line from a crash is skipped)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for path in (run_dir / "samples").glob("step_*.jsonl"):
        stem = path.stem.removeprefix("step_")
        if not stem.isdigit():
            continue
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        out[int(stem)] = rows
    return dict(sorted(out.items()))
