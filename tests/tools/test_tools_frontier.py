"""Tool runs and eval through the frontier (issue 43): the tool loop fills each sample of a frontier group over
the engine's submit / advance, at any ``rollout.max_lag``.

- ``max_lag = 0`` reproduces what the streamed-wave path recorded before the change (every trained sample, its
  tool turns, verdicts and rewards, and the tool and single-turn evals: tests/assets/
  recorded_tools_eval_issue43.json, written by ``tools_record`` on that path);
- ``max_lag = 1`` runs 3 steps: every trained token carries the version that sampled it, none lags by more
  than 1, and groups wait across updates;
- a tool run killed (SIGKILL) at several points resumes losslessly: unfinished trajectories restart from their
  prompts with their seeds, so the resumed run trains what the uninterrupted one trained.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tools_record
from rich.console import Console

from reasoning_rl.trainer.loop import Trainer


def test_max_lag_0_reproduces_the_streamed_wave_recording(tmp_path: Path, tiny_model_dir: Path) -> None:
    recorded = json.loads(tools_record.ASSET.read_text())
    got = json.loads(json.dumps(tools_record.record(tmp_path, tiny_model_dir)))
    assert got["train"] == recorded["train"]
    assert got["eval"] == recorded["eval"]
    assert got["eval_hf"] == recorded["eval_hf"]


def _rows(run: Path, step: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "samples" / f"step_{step}.jsonl").read_text().splitlines()]


def test_max_lag_1_three_steps_with_bounded_lag(tmp_path: Path, tiny_model_dir: Path) -> None:
    # all B x (1 + max_lag) = 4 groups generating: some finish beside the step's own and wait for the next
    cfg = tools_record.tool_config(
        tmp_path, tiny_model_dir, "lag1", rollout={"max_lag": 1, "running_groups": 4}
    )
    Trainer(cfg, console=Console(quiet=True)).run()
    metrics = [json.loads(line) for line in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [m for m in metrics if "reward/mean" in m]
    assert [m["step"] for m in rows] == [1, 2, 3]
    assert all(m["staleness/lag_max"] <= 1 and m["tools/calls_per_sample"] == 1.0 for m in rows)
    for step in (1, 2, 3):
        samples = _rows(cfg.run_dir, step)
        assert len(samples) == 8
        for r in samples:
            versions = r["versions"]
            assert len(versions) == r["response_tokens"] and all(0 <= step - 1 - v <= 1 for v in versions)
            (turn,) = r["turns"]
            assert r["response"].endswith(f"\\boxed{{{turn['output'].strip()}}}")
    # groups admitted before an update are trained after it (the stepped engine finishes them whole)
    assert any(step - 1 - v == 1 for step in (2, 3) for r in _rows(cfg.run_dir, step) for v in r["versions"])


def test_eval_between_continuous_steps_parks_the_training_requests(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Eval runs a frontier of its own on the training engine: with ``max_lag = 1`` the training frontier's
    resident requests are parked first and resubmitted at the next step, so every step still trains its groups
    within the lag bound."""
    cfg = tools_record.tool_config(
        tmp_path,
        tiny_model_dir,
        "hfeval",
        rollout={"engine": "hf", "tools": [], "max_tokens": 8, "max_lag": 1},
        data={"val": {"generator": "arithmetic", "size": 3}},
        eval={"every": 1},
    )
    Trainer(cfg, console=Console(quiet=True)).run()
    metrics = [json.loads(line) for line in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "reward/mean" in m]
    evals = [m for m in metrics if "eval/prompts" in m]
    assert [m["step"] for m in steps] == [1, 2, 3] and [m["step"] for m in evals] == [1, 2, 3]
    assert all(m["eval/prompts"] == 3.0 for m in evals) and all(m["staleness/lag_max"] <= 1 for m in steps)
    assert any(m["rollout/resubmitted"] > 0 for m in steps[1:])  # parked for eval, resubmitted after it
