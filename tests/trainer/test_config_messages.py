"""Config refusals a user reads (issue 47): ``eval.n > 1`` at the greedy default temperature is refused naming
eval.temperature (it reported pass@4/maj@4 of 4 identical samples), and a check across sections names its
fields in one short line instead of dumping the whole config (a 788-character line)."""

from __future__ import annotations

import pytest

from reasoning_rl.config import ConfigError, load_config

BASE = {"model": {"path": "m"}, "data": {"train": {"path": "d.jsonl"}}}


def _refusal(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(None, list(overrides), base=BASE)
    return str(err.value)


def test_eval_n_above_1_at_temperature_0_is_refused_naming_the_temperature() -> None:
    msg = _refusal("eval.n=4")
    (line,) = [x for x in msg.splitlines() if x.startswith("  ")]
    assert "eval.temperature" in line and "eval.n=4" in line and "pass@4" in line and "(got" not in line
    assert load_config(None, ["eval.n=4", "eval.temperature=0.6"], base=BASE).eval.n == 4
    assert load_config(None, ["eval.n=1"], base=BASE).eval.temperature == 0  # greedy n=1: fine


def test_a_cross_section_error_names_the_fields_not_the_whole_config() -> None:
    msg = _refusal("trainer.batch_size=3", "rollout.n=3", "algorithm.mini_batch_size=4")
    (line,) = [x for x in msg.splitlines() if x.startswith("  ")]
    assert "algorithm.mini_batch_size=4" in line and "trainer.batch_size*rollout.n=9" in line
    assert len(line) < 200 and "'model'" not in line and "(got" not in line and "Value error" not in line


def test_a_field_error_still_says_what_it_got() -> None:
    msg = _refusal("trainer.steps=-1")
    assert "trainer.steps" in msg and "(got -1)" in msg
