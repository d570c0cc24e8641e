"""Resume semantics without a model: which config changes a checkpoint refuses, the data fingerprint, metrics
kept on a fresh start, and the W&B run a resumed run continues."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from reasoning_rl.config import ConfigError, LoggingConfig, load_config
from reasoning_rl.data import Example
from reasoning_rl.trainer.metrics import MetricsLogger, check_wandb, read_metrics
from reasoning_rl.trainer.resume import TrainError, changed_keys, check_config, check_data, data_fingerprint

BASE = {"model": {"path": "m"}, "data": {"train": {"generator": "arithmetic"}}}


def _cfg(*overrides: str) -> Any:
    return load_config(None, list(overrides), base=BASE)


def test_trajectory_keys_are_refused_bookkeeping_keys_are_not() -> None:
    saved = _cfg().model_dump(mode="json")
    moved = _cfg(
        "model.path=other",
        "run.seed=1",
        "rollout.n=4",
        "optim.lr=0.01",
        "trainer.steps=500",
        "logging.console=plain",
        "grading.workers=4",
        "trainer.resume=auto",
        "eval.every=5",
        "grading.options={lean: {lean: /opt/lean}, math: {mode: lenient}}",
    )
    assert [k for k, _, _ in changed_keys(saved, moved)] == [
        "grading.options.math.mode",
        "model.path",
        "optim.lr",
        "rollout.n",
        "run.seed",
    ]
    with pytest.raises(TrainError) as err:
        check_config(saved, moved, Path("runs/x/checkpoints/step_4"))
    message = str(err.value)
    assert "optim.lr: 1e-06 -> 0.01" in message and "run.seed: 0 -> 1" in message and "--force" in message
    assert "grading.options.math.mode: (unset) -> 'lenient'" in message
    assert "trainer.steps" not in message and "grading.workers" not in message and "/opt/lean" not in message
    assert [k for k, _, _ in changed_keys(moved.model_dump(mode="json"), _cfg())] == [
        "grading.options.math.mode",
        "model.path",
        "optim.lr",
        "rollout.n",
        "run.seed",
    ]  # removed entries too
    forced = _cfg("model.path=other", "trainer.force_resume=true")
    assert check_config(saved, forced, Path("ckpt")) == ["model.path: 'm' -> 'other'"]
    # extending a cosine-scheduled run changes every learning rate after the checkpoint
    cosine = _cfg("optim.schedule=cosine").model_dump(mode="json")
    assert [k for k, _, _ in changed_keys(cosine, _cfg("optim.schedule=cosine", "trainer.steps=200"))] == [
        "trainer.steps"
    ]
    # a key the checkpoint's (older) config did not have is not a change
    older = {k: v for k, v in saved.items() if k != "logging"}
    older["trainer"] = {k: v for k, v in saved["trainer"].items() if k != "force_resume"}
    assert changed_keys(older, _cfg()) == []


def _examples(*truths: str) -> list[Example]:
    return [
        Example(f"{i}", "src", ({"role": "user", "content": f"q{i}"},), t, "math")
        for i, t in enumerate(truths)
    ]


def test_changed_training_rows_are_refused() -> None:
    saved = data_fingerprint(_examples("1", "2"))
    cfg = _cfg()
    assert check_data(saved, _examples("1", "2"), cfg, Path("c")) == []
    with pytest.raises(TrainError, match=r"training data changed .*same count \(2\) but different rows"):
        check_data(saved, _examples("1", "3"), cfg, Path("c"))
    with pytest.raises(TrainError, match=r"2 -> 3 prompts"):
        check_data(saved, _examples("1", "2", "3"), cfg, Path("c"))
    forced = _cfg("trainer.force_resume=true")
    assert check_data(saved, _examples("1", "3"), forced, Path("c")) != []
    with pytest.raises(TrainError, match="different number of prompts"):
        check_data(saved, _examples("1"), forced, Path("c"))


def test_fresh_start_keeps_the_old_metrics(tmp_path: Path) -> None:
    """Before: a fresh start (e.g. trainer.resume=auto without a checkpoint) deleted metrics.jsonl silently."""
    (tmp_path / "metrics.jsonl").write_text('{"step": 9}\n')
    (tmp_path / "metrics.1.jsonl").write_text('{"step": 7}\n')
    log = MetricsLogger(tmp_path, LoggingConfig(console="plain", tensorboard=False), total_steps=1)
    log.log(1, {"reward/mean": 0.5})
    log.close()
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 1, "reward/mean": 0.5}]
    assert read_metrics(tmp_path / "metrics.2.jsonl") == [{"step": 9}]
    assert read_metrics(tmp_path / "metrics.1.jsonl") == [{"step": 7}]


class _FakeWandb(types.ModuleType):
    """Stands in for the wandb package (not installed here); records what the logger asks of it."""

    def __init__(self) -> None:
        super().__init__("wandb")
        self.inits: list[dict[str, Any]] = []

    def init(self, **kwargs: Any) -> Any:
        self.inits.append(kwargs)
        run_id = kwargs.get("id") or f"run{len(self.inits)}"
        return types.SimpleNamespace(id=run_id, log=lambda *a, **k: None, finish=lambda: None)


def test_resumed_run_continues_its_wandb_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    cfg = LoggingConfig(console="none", tensorboard=False, wandb=True)
    MetricsLogger(tmp_path, cfg, total_steps=4).close()
    MetricsLogger(tmp_path, cfg, total_steps=4, start_step=2).close()
    assert fake.inits[0]["id"] is None
    assert fake.inits[1]["id"] == "run1" and fake.inits[1]["resume"] == "allow"
    MetricsLogger(tmp_path, cfg, total_steps=4).close()  # a fresh start in the same dir is a new W&B run
    assert fake.inits[2]["id"] is None


def test_missing_wandb_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(ConfigError, match="logging.wandb=true but wandb is not installed"):
        check_wandb(LoggingConfig(wandb=True))
    check_wandb(LoggingConfig(wandb=False))
