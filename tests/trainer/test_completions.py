"""Completions where people look (issue 19): TensorBoard text, a W&B table, and the report's Samples section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reasoning_rl.config import LoggingConfig
from reasoning_rl.report import write_report
from reasoning_rl.report.samples import PER_STEP
from reasoning_rl.samples import COLUMNS, pick
from reasoning_rl.trainer.metrics import MetricsLogger
from tests.test_report import make_run


def _row(i: int, score: float, verdict: str, reason: str, response: str | None = None) -> dict[str, Any]:
    return {
        "id": f"q{i}",
        "group": i,
        "sample": 0,
        "data_source": "arith",
        "prompt": [{"role": "user", "content": f"What is {i}+{i}?"}],
        "ground_truth": str(2 * i),
        "response": response if response is not None else f"answer {i}",
        "finish_reason": "stop",
        "score": score,
        "verdict": verdict,
        "reason": reason,
        "details": {},
    }


ROWS = [
    _row(1, 0.0, "incorrect", "not equivalent"),
    _row(2, 1.0, "correct", "equivalent"),
    _row(3, 0.0, "error", "sandbox down"),
    _row(4, 0.5, "correct", "partial | half"),
    _row(5, 0.0, "incorrect", "no box", response="a <script>alert(1)</script>\nline two"),
]


def test_pick_takes_best_worst_and_errored_in_turn() -> None:
    picked = pick(ROWS, 4)
    assert [(k, r["id"]) for k, r in picked] == [
        ("best", "q2"),
        ("worst", "q5"),
        ("errored", "q3"),
        ("best", "q4"),
    ]
    assert len({r["id"] for _, r in pick(ROWS, 99)}) == len(ROWS)  # each sample once, none lost
    assert pick(ROWS, 0) == [] and pick([], 5) == []


def _text_events(tb_dir: Path) -> dict[int, str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir), size_guidance={"tensors": 0})
    acc.Reload()
    tag = next(t for t in acc.Tags()["tensors"] if t.startswith("samples"))
    return {e.step: e.tensor_proto.string_val[0].decode() for e in acc.Tensors(tag)}


def test_tensorboard_gets_the_samples_as_text(tmp_path: Path) -> None:
    log = MetricsLogger(
        tmp_path, LoggingConfig(console="none", tensorboard=True, log_completions=3), total_steps=2
    )
    log.log_samples(1, ROWS)
    log.log_samples(2, ROWS[:1])
    log.close()
    events = _text_events(tmp_path / "tensorboard")
    assert sorted(events) == [1, 2]
    first = events[1]
    assert first.splitlines()[0] == "| " + " | ".join(COLUMNS) + " |"
    assert "| best | arith | What is 2+2? | answer 2 | 4 | correct | 1.0 | equivalent |" in first
    assert "a <script>alert(1)</script><br>line two" in first and "sandbox down" in first
    assert "q4" not in first and "partial" not in first  # only log_completions=3 rows
    assert "What is 1+1?" in events[2]


def test_no_completions_logged_when_off(tmp_path: Path) -> None:
    log = MetricsLogger(
        tmp_path, LoggingConfig(console="none", tensorboard=True, log_completions=0), total_steps=1
    )
    log.log_samples(1, ROWS)
    log.log(1, {"reward/mean": 0.5})
    log.close()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert acc.Tags()["tensors"] == [] and acc.Tags()["scalars"] == ["reward/mean"]


def test_wandb_gets_a_table(tmp_path: Path) -> None:
    wandb = pytest.importorskip("wandb")

    class Run:
        logged: list[tuple[dict[str, Any], int]] = []

        def log(self, data: dict[str, Any], step: int) -> None:
            self.logged.append((data, step))

        def finish(self) -> None:
            pass

    log = MetricsLogger(
        tmp_path, LoggingConfig(console="none", tensorboard=False, log_completions=2), total_steps=1
    )
    log._wandb = Run()
    log.log_samples(3, ROWS)
    ((data, step),) = Run.logged
    assert step == 3 and isinstance(data["samples"], wandb.Table)
    assert list(data["samples"].columns) == list(COLUMNS) and len(data["samples"].data) == 2


def test_report_has_a_searchable_samples_section(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    (run / "samples").mkdir()
    for step, rows in ((1, ROWS), (2, ROWS[:2])):
        (run / "samples" / f"step_{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = write_report(run).html.read_text()
    section = page[page.index("<h2>Samples</h2>") :]
    assert 'id="sample-search"' in section and "rrlSampleSearch" in section
    assert "step 1: 5 samples, 1 errored" in section and "step 2: 2 samples, 0 errored" in section
    assert section.count('<tr class="sample">') == 5 + 2
    assert "sandbox down" in section and "What is 2+2?" in section
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in section  # responses are escaped
    empty = make_run(tmp_path / "empty")
    assert "No samples/ in this run" in write_report(empty).html.read_text()


@pytest.mark.slow
def test_a_training_run_shows_its_completions(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The trainer calls the logger every step: 2 tiny steps, read back from the run's own event files."""
    from tests.trainer.test_cli_runs import hf_config
    from tests.trainer.test_train_e2e import train

    cfg = hf_config(tmp_path, tiny_model_dir, "seen", logging={"tensorboard": True, "log_completions": 2})
    train(cfg)
    run = tmp_path / "seen"
    events = _text_events(run / "tensorboard")
    assert sorted(events) == [1, 2]
    stored = [json.loads(line) for line in (run / "samples" / "step_2.jsonl").read_text().splitlines()]
    assert any(f"| {r['ground_truth']} | {r['verdict']} |" in events[2] for r in stored)
    assert len(events[2].splitlines()) == 2 + 2  # header, separator, log_completions rows
    page = write_report(run).html.read_text()
    assert "step 2: 8 samples" in page  # batch_size 2 x rollout.n 4
    assert page.count('<tr class="sample">') == 2 * PER_STEP  # the report shows its own PER_STEP picks
