"""``rrl train --force`` on a checkpoint with an in-flight frontier (rollout.max_lag > 0, issue 41): a smaller
rollout.max_lag / trainer.batch_size / rollout.max_tokens, or another rollout.n, passed ``--force`` and the run
died at step 1 (a group past its deadline, a group that never completes, a partial sample with no token budget).
Now it is refused before anything loads, in one line naming the key and both values."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from reasoning_rl.checkpoint import CheckpointManager
from reasoning_rl.config import Config, load_config
from reasoning_rl.trainer.resume import TrainError, check_config, check_frontier

BASE = {
    "run": {"name": "r"},
    "model": {"path": "m"},
    "data": {"train": {"generator": "fixed_digit"}},
    "rollout": {"n": 4, "max_tokens": 24, "max_lag": 2},
    "trainer": {"batch_size": 2},
}
IN_FLIGHT = {"groups": [{"ticket": 2}, {"ticket": 3}], "partial": [{"ticket": 3, "token_ids": [1, 2]}]}


def _cfg(section: str, key: str, value: int) -> Config:
    return Config.model_validate({**BASE, section: {**BASE[section], key: value}})


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [("rollout", "max_lag", 1), ("trainer", "batch_size", 1), ("rollout", "max_tokens", 8), ("rollout", "n", 2),
     ("rollout", "n", 8)],
)  # fmt: skip
def test_a_config_that_cannot_take_the_frontier_is_refused_in_one_line(
    section: str, key: str, value: int
) -> None:
    saved = Config.model_validate(BASE).model_dump(mode="json")
    was = BASE[section][key]
    with pytest.raises(TrainError) as e:
        check_frontier(saved, IN_FLIGHT, _cfg(section, key, value), Path("ckpt/step_1"))
    line = str(e.value)
    assert (
        f"{section}.{key}: {was} -> {value}" in line and "2 in-flight group(s)" in line and "\n" not in line
    )
    assert f"resume with {section}.{key}={was}" in line


def test_what_the_frontier_can_take_is_accepted() -> None:
    saved = Config.model_validate(BASE).model_dump(mode="json")
    for section, key, value in [
        ("rollout", "max_lag", 3),
        ("trainer", "batch_size", 4),
        ("rollout", "max_tokens", 32),
        ("rollout", "running_groups", 1),  # slots only delay admission: groups over the target drain
        ("rollout", "running_groups", 6),
    ]:
        check_frontier(saved, IN_FLIGHT, _cfg(section, key, value), Path("c"))
    smaller = _cfg("rollout", "max_lag", 0)
    check_frontier(
        saved, {"groups": [], "partial": []}, smaller, Path("c")
    )  # nothing in flight: nothing to fit
    check_frontier(saved, None, smaller, Path("c"))  # a synchronous run's checkpoint
    check_frontier(None, IN_FLIGHT, smaller, Path("c"))  # a checkpoint from before configs were saved


@pytest.mark.slow
@pytest.mark.vllm
def test_forced_resume_of_a_continuous_checkpoint_is_refused_before_loading(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    from test_train_e2e import REPO, config, env, train, train_cmd

    cfg = config(
        tmp_path,
        tiny_model_dir,
        "cont",
        trainer={"steps": 1, "batch_size": 2, "checkpoint_every": 1},
        rollout={"n": 4, "max_tokens": 24, "max_lag": 2},
    )
    train(cfg)
    ckpt = tmp_path / "cont" / "checkpoints" / "step_1"
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["frontier"]["groups"], (
        "the checkpoint holds in-flight groups (2 slots refilled as groups finish, 2 trained)"
    )
    # the CLI refuses before loading (one subprocess: the wiring); each key against the real checkpoint's saved
    # config and frontier in this process, through the run's own loader and check (one process each cost ~10 s)
    forced = ("trainer.resume=auto", "trainer.force_resume=true", "trainer.steps=2")
    proc = subprocess.run(
        train_cmd(cfg, *forced, "rollout.max_lag=1"), cwd=REPO, env=env(), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    err = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "rollout.max_lag: 2 -> 1" in err and "Traceback" not in proc.stderr, err
    assert not (tmp_path / "cont" / "checkpoints" / "step_2").exists()
    saved = CheckpointManager.load_trainer_state(ckpt)  # as the run reads it
    for override, needle in [
        ("rollout.max_lag=1", "rollout.max_lag: 2 -> 1"),
        ("trainer.batch_size=1", "trainer.batch_size: 2 -> 1"),
        ("rollout.max_tokens=8", "rollout.max_tokens: 24 -> 8"),
        ("rollout.n=2", "rollout.n: 4 -> 2"),
    ]:
        resumed = load_config(str(cfg), [*forced, override])
        check_config(saved.get("config"), resumed, ckpt)  # --force: a changed key is only a warning
        with pytest.raises(TrainError) as refusal:
            check_frontier(saved.get("config"), saved.get("frontier"), resumed, ckpt)
        assert needle in str(refusal.value), str(refusal.value)
