"""Every example config validates and its data files load with the installed graders."""

from __future__ import annotations

from pathlib import Path

import pytest

import graders
from reasoning_rl.config import load_config
from reasoning_rl.data import load_examples

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "examples").glob("*/config.yaml")) + [REPO / "reasoning_rl" / "demo.yaml"]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.parent.name if p.name == "config.yaml" else p.stem)
def test_example_config_and_data_load(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    cfg = load_config(path)
    known = frozenset(graders.available())
    for sources in (cfg.data.train, cfg.data.val):
        if sources:
            examples = load_examples(sources, cfg.data, seed=0, known_graders=known)
            assert examples and all(e.grader in known for e in examples)


def test_example_dirs_present() -> None:
    names = {p.parent.name for p in CONFIGS if p.name == "config.yaml"}
    assert {"math_grpo", "math_tir", "code_grpo", "lean_prelude", "eval_only"} <= names


def test_the_examples_readme_commands_validate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The `rrl train CONFIG key=value` lines of examples/README.md (issue 47 added model.lora, rollout.max_lag
    and rollout.speculative there) are configs that validate: a renamed key fails here, not for a reader."""
    import re
    import shlex

    monkeypatch.chdir(REPO)
    lines = re.findall(r"^rrl train (.+?)(?:\s+#.*)?$", (REPO / "examples" / "README.md").read_text(), re.M)
    assert len(lines) >= 3
    for line in lines:
        config, *overrides = shlex.split(line)
        load_config(config, overrides)
