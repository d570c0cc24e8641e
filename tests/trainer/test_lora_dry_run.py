"""``rrl train --dry-run`` attaches the LoRA adapters to the model built on the meta device, with the run's own
``add_adapters`` (issues 41 and 47): ``model.lora.target_modules=[embed_tokens]`` passed the config and the dry
run, then died in step 1's hand-off with a traceback; targets that match nothing and an adapted tied LM head were
refused by the run only. Now the dry run refuses exactly what the run refuses, in the same one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from reasoning_rl.cli.app import app
from reasoning_rl.config import ConfigError, LoraConfig
from reasoning_rl.policy import Policy
from tests.trainer.test_train_e2e import config

pytestmark = pytest.mark.slow


def _dry_run(cfg: Path, targets: str) -> tuple[int, str]:
    res = CliRunner().invoke(
        app, ["train", str(cfg), "--dry-run", "model.lora.rank=2", f"model.lora.target_modules={targets}"]
    )
    assert "Traceback" not in res.output
    return res.exit_code, " ".join(res.stderr.split())


@pytest.mark.parametrize(
    ("targets", "modules", "why"),
    [
        (
            "[embed_tokens]",
            ["embed_tokens"],
            "adapts 1 layer(s) that are not linear (first: model.embed_tokens",
        ),
        ("[q_projj]", ["q_projj"], "Target modules {'q_projj'} not found in the base model"),
        ("[q_proj, lm_head]", ["q_proj", "lm_head"], "adapts the LM head (lm_head), which this model ties"),
    ],
)
def test_dry_run_refuses_what_the_run_refuses_in_the_same_line(
    tmp_path: Path, tiny_model_dir: Path, targets: str, modules: list[str], why: str
) -> None:
    code, err = _dry_run(config(tmp_path, tiny_model_dir, "dry"), targets)
    assert code == 2 and why in err, err
    with pytest.raises(
        ConfigError
    ) as run:  # the run's own model load (Policy, as every model worker builds it)
        Policy.from_pretrained(str(tiny_model_dir), lora=LoraConfig(rank=2, target_modules=modules))
    assert f"error: {' '.join(str(run.value).split())}" in err and "\n" not in str(run.value)
    assert not (tmp_path / "dry").exists()


def test_dry_run_accepts_linear_targets(tmp_path: Path, tiny_model_dir: Path) -> None:
    code, err = _dry_run(config(tmp_path, tiny_model_dir, "dry"), "[q_proj, v_proj]")
    assert code == 0, err
