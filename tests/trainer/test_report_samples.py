"""The report's Samples section picks each step's best, worst and errored samples (issue 19 acceptance)."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path
from typing import Any

from reasoning_rl.report import write_report
from reasoning_rl.report.samples import PER_STEP
from reasoning_rl.samples import COLUMNS
from tests.test_report import make_run


def _rows(step: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(10):
        error = i in (3, 7)
        rows.append(
            {
                "id": f"s{step}-{i}",
                "data_source": "arith",
                "prompt": [{"role": "user", "content": f"step {step} question {i}"}],
                "ground_truth": str(i),
                "response": f"step {step} response {i}",
                "score": 0.0 if error else i / 10,
                "verdict": "error" if error else ("correct" if i >= 5 else "incorrect"),
                "reason": f"step {step} reason {i}",
            }
        )
    return rows


def _shown(section: str) -> dict[int, list[tuple[str, str]]]:
    """step -> [(kind, response)] of the sample rows, in page order."""
    out: dict[int, list[tuple[str, str]]] = {}
    for block in section.split('<details class="samples-step"')[1:]:
        step = int(re.search(r"<summary>step (\d+):", block)[1])  # type: ignore[index]
        rows = re.findall(r'<tr class="sample">(.*?)</tr>', block)
        cells = [[unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)] for row in rows]
        out[step] = [(c[COLUMNS.index("kind")], c[COLUMNS.index("response")]) for c in cells]
    return out


def test_each_step_shows_its_best_worst_and_errored_samples(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    (run / "samples").mkdir()
    for step in (1, 2, 10):
        (run / "samples" / f"step_{step}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in _rows(step))
        )
    page = write_report(run).html.read_text()
    section = page[page.index("<h2>Samples</h2>") :]
    shown = _shown(section)
    assert list(shown) == [1, 2, 10]  # numeric step order, not file-name order
    for step, picked in shown.items():
        assert len(picked) == PER_STEP == 6
        r = [f"step {step} response {i}" for i in range(10)]
        assert picked == [
            ("best", r[9]),
            ("worst", r[0]),
            ("errored", r[3]),
            ("best", r[8]),
            ("worst", r[1]),
            ("errored", r[7]),
        ]
        assert f"step {step}: 10 samples, 2 errored" in section
    # the search box filters on each row's text: prompt, response, ground truth and reason are all in the row
    row = re.search(r'<tr class="sample">(.*?)</tr>', section)[1]  # type: ignore[index]
    assert all(text in row for text in ("step 1 question 9", "step 1 response 9", "step 1 reason 9"))
    assert section.count('<details class="samples-step" open>') == 1  # the last step opens; the others fold
    assert '<details class="samples-step" open><summary>step 10:' in section
