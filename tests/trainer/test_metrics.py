"""Metrics: JSONL + TensorBoard written per step; a resume drops steps past the checkpoint."""

from __future__ import annotations

from pathlib import Path

from reasoning_rl.config import LoggingConfig
from reasoning_rl.trainer.metrics import MetricsLogger, read_metrics


def test_jsonl_tensorboard_and_resume_truncation(tmp_path: Path) -> None:
    cfg = LoggingConfig(console="plain", tensorboard=True)
    log = MetricsLogger(tmp_path, cfg, total_steps=5)
    for step in range(1, 6):
        log.log(step, {"reward/mean": step / 10, "policy/kl": 0.0})
    log.close()
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4, 5]
    assert any((tmp_path / "tensorboard").iterdir())

    resumed = MetricsLogger(tmp_path, cfg, total_steps=5, start_step=3)  # checkpoint at 3, crash after 5
    resumed.log(4, {"reward/mean": 0.99})
    resumed.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and rows[-1]["reward/mean"] == 0.99


def test_fresh_start_replaces_old_metrics(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 9}\n')
    log = MetricsLogger(tmp_path, LoggingConfig(console="none", tensorboard=False), total_steps=1)
    log.log(1, {"reward/mean": 0.5})
    log.close()
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 1, "reward/mean": 0.5}]
