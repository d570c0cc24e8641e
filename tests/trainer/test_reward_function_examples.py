"""docs/from-trl-and-verl.md's two examples (issue 47) train 2 steps on the tiny model as they are: the TRL reward
functions and the verl compute_score each judge every sample (the reward a sample row records is what the function
returns for that response, recomputed here), and a function that raises on some rows costs those rows only."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.trainer.test_cli_runs import ok, run
from tests.trainer.test_train_e2e import REPO, metrics, train_cmd

pytestmark = pytest.mark.slow

SMALL = [
    "rollout.engine=hf",
    "rollout.n=4",
    "rollout.max_tokens=16",
    "trainer.steps=2",
    "trainer.batch_size=2",
    "trainer.export=false",
    "run.doctor=false",
    "grading.workers=1",
    "logging.console=plain",
    "logging.tensorboard=false",
]


def samples(run_dir: Path, step: int) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "samples" / f"step_{step}.jsonl").read_text().splitlines()]


def train_example(name: str, tiny_model_dir: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / name
    cmd = train_cmd(
        REPO / "examples" / name / "config.yaml", f"model.path={tiny_model_dir}", f"run.dir={run_dir}"
    )
    ok(run([*cmd, *SMALL]))
    steps = [m for m in metrics(run_dir) if "reward/mean" in m]
    assert len(steps) == 2 and all(m["grading/masked"] == 0 for m in steps)
    return run_dir


def test_trl_reward_functions_example_trains(tiny_model_dir: Path, tmp_path: Path) -> None:
    rewards = importlib.import_module("examples.trl_reward_function.rewards")
    run_dir = train_example("trl_reward_function", tiny_model_dir, tmp_path)
    for step in (1, 2):
        rows = samples(run_dir, step)
        assert len(rows) == 8
        for r in rows:
            columns = {"prompts": [r["prompt"]], "completions": [r["response"]]}  # by keyword, as TRL calls
            accuracy = rewards.accuracy_reward(**columns, ground_truth=[r["ground_truth"]])[0]
            form = rewards.format_reward(**columns)[0]
            assert r["rewards"]["accuracy_reward"]["score"] == accuracy
            assert r["rewards"]["format_reward"]["score"] == form
            assert r["reward"] == pytest.approx(accuracy + 0.1 * form)
            assert r["verdict"] == ("correct" if accuracy == 1.0 else "incorrect")


def test_verl_compute_score_example_trains(tiny_model_dir: Path, tmp_path: Path) -> None:
    score = importlib.import_module("examples.verl_compute_score.compute_score")
    run_dir = train_example("verl_compute_score", tiny_model_dir, tmp_path)
    data = [json.loads(x) for x in (REPO / "datasets/math/gsm8k_style.jsonl").read_text().splitlines()]
    extra = {row["prompt"][-1]["content"]: row["extra_info"] for row in data}
    for step in (1, 2):
        rows = samples(run_dir, step)
        assert len(rows) == 8
        for r in rows:
            want = score.compute_score(
                r["data_source"], r["response"], r["ground_truth"], extra[r["prompt"][-1]["content"]]
            )
            assert r["rewards"]["compute_score"]["score"] == want["score"]
            assert r["verdict"] == ("correct" if want["acc"] else "incorrect")
            assert r["details"]["pred"] == want["pred"]
            assert (r["grader"], r["grader_version"]) == ("compute_score", "1")  # the function, not `math`
    for m in (m for m in metrics(run_dir) if "reward/mean" in m):  # its verdicts, under its own name
        fn = "grading/examples.verl_compute_score.compute_score:compute_score"
        assert m.get(f"{fn}/correct", 0) + m.get(f"{fn}/incorrect", 0) == 8, m
        assert not any(key.startswith("grading/math/") for key in m), m


def test_a_function_that_raises_on_some_rows_costs_those_rows(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "two.jsonl"
    data.write_text("".join(json.dumps({"question": f"Say {n}", "answer": str(n)}) + "\n" for n in (1, 2)))
    cfg = tmp_path / "faulty.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "run": {"name": "faulty", "dir": str(tmp_path / "faulty")},
                "model": {"path": str(tiny_model_dir)},
                "data": {"train": {"path": str(data)}},
                "grading": {"rewards": [{"function": "reward_fn_faults:fails_on_gold_two"}], "cache": False},
            }
        )
    )
    ok(run([*train_cmd(cfg), *SMALL]))
    steps = [m for m in metrics(tmp_path / "faulty") if "reward/mean" in m]
    assert [m["grading/masked"] for m in steps] == [4.0, 4.0]  # the gold-2 row's 4 samples, each step
    for step in (1, 2):
        rows = samples(tmp_path / "faulty", step)
        bad = [r for r in rows if r["ground_truth"] == "2"]
        good = [r for r in rows if r["ground_truth"] == "1"]
        assert len(bad) == len(good) == 4
        assert all(r["verdict"] == "error" for r in bad)
        assert all("function 'fails_on_gold_two' (row " in r["reason"] for r in bad)
        assert all("raised ValueError: no rule for this row" in r["reason"] for r in bad)
        assert all(r["verdict"] == "incorrect" and r["reward"] == 0.5 for r in good)
