"""``rrl train --print-config`` / ``--dry-run`` and override values that need no YAML quoting (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from reasoning_rl.cli.app import app
from reasoning_rl.config import ConfigError, load_config
from tests.trainer.test_train_e2e import config

runner = CliRunner()


def _qa_file(tmp_path: Path, rows: list[dict[str, Any]] | None = None, name: str = "qa") -> Path:
    path = tmp_path / f"{name}.jsonl"
    rows = rows or [{"question": "1+1", "answer": "2"}, {"question": "2+3", "answer": "5"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_override_string_needs_no_yaml_quoting(tmp_path: Path) -> None:
    """Before: YAML read `{question} Answer:` as a mapping (or failed), so the override was refused."""
    cfg_path = config(tmp_path, tmp_path, "q")
    cfg = load_config(
        cfg_path,
        [
            "data.prompt_template={question} Answer:",
            "data.system_prompt={be brief}",
            "run.name=123",
            "data.grader_map.openai/gsm8k=math",
        ],
    )
    assert cfg.data.prompt_template == "{question} Answer:"
    assert cfg.data.system_prompt == "{be brief}"
    assert cfg.run.name == "123" and cfg.data.grader_map == {"openai/gsm8k": "math"}
    # Quoted values are still unquoted; null still clears an optional string; typed keys stay YAML.
    cfg = load_config(
        cfg_path,
        [
            "data.prompt_template='{question} A:'",
            "data.system_prompt=null",
            "rollout.n=4",
            "rollout.stop=[x, y]",
            "data.val=[{generator: fixed_digit}]",
        ],
    )
    assert cfg.data.prompt_template == "{question} A:" and cfg.data.system_prompt is None
    assert (
        cfg.rollout.n == 4 and cfg.rollout.stop == ["x", "y"] and cfg.data.val[0].generator == "fixed_digit"
    )
    with pytest.raises(ConfigError, match="rollout.n"):
        load_config(cfg_path, ["rollout.n={x}"])


def test_print_config_prints_the_resolved_config_and_exits(tmp_path: Path) -> None:
    cfg_path = config(tmp_path, tmp_path / "no-model-needed", "printed")
    res = runner.invoke(
        app,
        ["train", str(cfg_path), "--print-config", "data.prompt_template={question} Answer:", "rollout.n=2"],
    )
    assert res.exit_code == 0, res.output
    printed = yaml.safe_load(res.stdout)
    expected = load_config(cfg_path, ["data.prompt_template={question} Answer:", "rollout.n=2"])
    assert printed == expected.model_dump(mode="json")
    assert printed["data"]["prompt_template"] == "{question} Answer:" and printed["rollout"]["n"] == 2
    assert printed["optim"]["lr"] == 0.01 and "max_prompt_tokens" in printed["data"]  # defaults spelled out
    assert not (tmp_path / "printed").exists()
    bad = runner.invoke(app, ["train", str(cfg_path), "--print-config", "rollout.nn=2"])
    assert bad.exit_code == 2 and "rollout" in bad.stderr and "nn" in bad.stderr


@pytest.mark.slow
def test_dry_run_checks_everything_and_trains_nothing(tmp_path: Path, tiny_model_dir: Path) -> None:
    data = {"train": {"path": str(_qa_file(tmp_path))}, "default_grader": "math"}
    cfg_path = config(tmp_path, tiny_model_dir, "dry", data=data, run={"doctor": True})
    res = runner.invoke(app, ["train", str(cfg_path), "--dry-run", "data.prompt_template={question} Answer:"])
    assert res.exit_code == 0, res.output
    assert "data: 2 train" in res.stdout and "graders: math" in res.stdout and "dry run ok" in res.stdout
    assert "doctor: required checks pass" in res.stdout
    assert "memory plan: update peak" in res.stdout and "optimizer" in res.stdout  # planned from step 1
    assert not (tmp_path / "dry").exists()

    def refused(*extra: str, cfg: Path = cfg_path) -> str:
        out = runner.invoke(app, ["train", str(cfg), "--dry-run", *extra])
        assert out.exit_code == 2, out.output
        assert "Traceback" not in out.output
        return " ".join(out.stderr.split())

    assert "grading.options.math" in refused("grading.options={math: {mode: bogus}}")
    composed = "grading.rewards=[{weight: 1}, {grader: format, options: {style: xml}}]"
    assert "reward component 'format' (format): format grader: style" in refused(composed)
    needs = refused("grading.rewards=[{grader: 'task_graders:TargetFromContext'}]")
    assert "example '0:0'" in needs and "needs context field 'extra_info'" in needs  # the row lacks it
    assert "does not exist" in refused(f"model.path={tmp_path / 'missing'}")
    assert "prompt_template refers to 'nope'" in refused("data.prompt_template={nope}")
    bad_rows = config(
        tmp_path,
        tiny_model_dir,
        "dry2",
        data={"train": {"path": str(_qa_file(tmp_path, [{"question": "1+1"}], "bad"))}},
    )
    assert "ground truth" in refused(cfg=bad_rows)
    assert "data.max_prompt_tokens=3" in refused("data.max_prompt_tokens=3")
    assert not (tmp_path / "dry").exists() and not (tmp_path / "dry2").exists()
