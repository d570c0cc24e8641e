"""``rrl sft`` end to end on the tiny model: it learns a seeded task (eval loss down, greedy answers right on
held-out prompts where the base model's were not), ``rrl export`` reads its run dir, GRPO starts from it
(``rrl train model.path=RUN_DIR``, reference = the SFT result), a SIGKILLed run resumes exactly, and a LoRA run
checkpoints its adapters alone."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ANSWER = "7"


def rows(n: int, seed: int) -> list[dict[str, Any]]:
    """The seeded task: whatever the (random) question, answer 7 (and stop): what a random model never says. Seed 0
    (training) asks q0..q499, any other seed q500..q999: held-out prompts are never trained on."""
    rng = random.Random(seed)
    lo = 0 if seed == 0 else 500
    return [{"prompt": f"q{rng.randint(lo, lo + 499)}", "response": ANSWER} for _ in range(n)]


def sft_config(tmp: Path, model_dir: Path, name: str, **sections: Any) -> Path:
    for split, n, seed in (("train", 64, 0), ("val", 16, 1)):
        path = tmp / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows(n, seed)))
    cfg: dict[str, Any] = {
        "run": {"name": name, "dir": str(tmp / name), "doctor": False, "device": "cpu"},
        "model": {"path": str(model_dir)},
        "data": {"train": str(tmp / "train.jsonl"), "val": str(tmp / "val.jsonl")},
        "optim": {"lr": 1e-2, "warmup_steps": 1},
        "sft": {"epochs": 5, "batch_size": 16},
        "trainer": {"export": False},
        "logging": {"console": "plain", "tensorboard": False},
    }
    for key, value in sections.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def sft(cfg: Path, *overrides: str) -> Any:
    from rich.console import Console

    from reasoning_rl.config import load_config
    from reasoning_rl.trainer.sft import SftTrainer

    return SftTrainer(load_config(str(cfg), list(overrides)), console=Console(quiet=True)).run()


def env(**extra: str) -> dict[str, str]:
    here = REPO / "tests" / "trainer"  # task_graders
    return {**os.environ, "PYTHONPATH": f"{here}{os.pathsep}{REPO}", **extra}


def metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def greedy_correct(model_dir: Path, prompts: list[str]) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    lm = AutoModelForCausalLM.from_pretrained(model_dir)
    right = 0
    for prompt in prompts:
        ids = tok.apply_chat_template(
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )["input_ids"]
        out = lm.generate(ids, max_new_tokens=4, do_sample=False)
        right += tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True) == ANSWER
    return right


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    tmp = tmp_path_factory.mktemp("sft")
    sft(sft_config(tmp, tiny_model_dir, "warm", logging={"tensorboard": True}))
    return tmp / "warm"


def test_sft_learns_held_out_prompts_and_exports(sft_run: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    from reasoning_rl.trainer.export import export_checkpoint

    evals = [r for r in metrics(sft_run) if "eval/loss" in r]
    assert evals[0]["step"] == 0 and evals[-1]["step"] == 20
    assert evals[-1]["eval/loss"] < evals[0]["eval/loss"] / 4
    assert evals[-1]["eval/token_accuracy"] == 1.0 > evals[0]["eval/token_accuracy"]
    assert list((sft_run / "tensorboard").glob("events.out.tfevents.*"))
    held_out = [r["prompt"] for r in rows(16, 1)]
    assert not set(held_out) & {r["prompt"] for r in rows(64, 0)}
    exported = export_checkpoint(sft_run, out=tmp_path / "export")  # what `rrl export RUN_DIR` runs
    assert greedy_correct(tiny_model_dir, held_out) == 0
    assert greedy_correct(exported, held_out) == len(held_out)


def test_grpo_starts_from_the_sft_run_dir(sft_run: Path, tmp_path: Path) -> None:
    """Three GRPO steps from ``model.path=RUN_DIR``: the task is already solved at step 1 (the base model
    scores 0), and with a KL term the reference is the SFT result (KL 0 at the first update)."""
    cfg = {
        "run": {"name": "rl", "dir": str(tmp_path / "rl"), "doctor": False, "device": "cpu"},
        "model": {"path": "BASE_REPLACED_BELOW"},
        "data": {
            "train": {"path": str(sft_run.parent / "val.jsonl")},
            "prompt_template": "{question}",
            "default_grader": "task_graders:ContainsAnswer",
        },
        "rollout": {"engine": "hf", "n": 2, "max_tokens": 4, "temperature": 1.0},
        "algorithm": {"kl_coef": 0.1, "old_logprobs": "recompute"},
        "trainer": {"steps": 3, "batch_size": 2, "export": False},
        "grading": {"workers": 1, "cache": False},
        "logging": {"console": "plain", "tensorboard": False, "samples": False},
    }
    rl_rows = tmp_path / "rl.jsonl"
    rl_rows.write_text(
        "".join(json.dumps({"question": r["prompt"], "answer": ANSWER}) + "\n" for r in rows(8, 2))
    )
    cfg["data"]["train"] = {"path": str(rl_rows)}
    path = tmp_path / "rl.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(
        [sys.executable, "-m", "reasoning_rl.cli", "train", str(path), f"model.path={sft_run}"],
        cwd=REPO,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = [r for r in metrics(tmp_path / "rl") if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert steps[0]["reward/mean"] == 1.0
    assert steps[0]["policy/kl"] == pytest.approx(0.0, abs=1e-6)
    saved = yaml.safe_load((tmp_path / "rl" / "config.yaml").read_text())
    assert Path(saved["model"]["path"]) == (sft_run / "export" / "step_20").resolve()


def test_sigkill_then_resume_is_exact(tiny_model_dir: Path, tmp_path: Path) -> None:
    from reasoning_rl.policy.sharded import read_model_state

    short = {"sft": {"epochs": 1, "batch_size": 16}, "trainer": {"checkpoint_every": 2, "export": False}}
    whole = sft_config(tmp_path, tiny_model_dir, "whole", **short)
    sft(whole)
    cut = sft_config(tmp_path, tiny_model_dir, "cut", **short)
    proc = subprocess.run(
        [sys.executable, "-m", "reasoning_rl.cli", "sft", str(cut)],
        cwd=REPO,
        env=env(RRL_FAULT="update:3"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    run = tmp_path / "cut"
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == ["step_2"]
    sft(cut, "trainer.resume=auto")
    a = read_model_state(tmp_path / "whole" / "checkpoints" / "step_4" / "policy")
    b = read_model_state(run / "checkpoints" / "step_4" / "policy")
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    losses = [[r.get("train/loss") for r in metrics(tmp_path / name)] for name in ("whole", "cut")]
    assert losses[0] == losses[1] and len(losses[0]) == 5  # steps 0 (eval) .. 4, none twice


def test_lora_sft_checkpoints_adapters_only(tiny_model_dir: Path, tmp_path: Path) -> None:
    from reasoning_rl.checkpoint import ADAPTER_DIR
    from reasoning_rl.policy.sharded import read_model_state
    from reasoning_rl.trainer.export import export_checkpoint

    cfg = sft_config(tmp_path, tiny_model_dir, "lora", sft={"max_steps": 2}, model={"lora": {"rank": 4}})
    sft(cfg)
    ckpt = tmp_path / "lora" / "checkpoints" / "step_2"
    state = read_model_state(ckpt / "policy")
    assert state and all("lora_" in k for k in state), sorted(state)[:5]
    assert (ckpt / ADAPTER_DIR).is_dir()
    adapter = export_checkpoint(tmp_path / "lora", form="adapter", out=tmp_path / "adapter")
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "config.json").exists()


@pytest.mark.distributed
def test_two_ray_ranks_match_one(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``rrl sft`` on two Ray ranks (the workers of ``rrl train``, FSDP2 over gloo) equals one in-process rank:
    losses within 1e-4 relative, weights within 1e-5 (a key projection's bias, whose true gradient is 0, at
    3 x lr: Adam turns reduction-order noise into an update below lr; tests/distributed/runs.py)."""
    pytest.importorskip("ray")
    from reasoning_rl.policy.sharded import read_model_state

    states, losses = [], []
    for ranks in (1, 2):
        name = f"r{ranks}"
        cfg = sft_config(
            tmp_path, tiny_model_dir, name, sft={"max_steps": 2}, resources={"ranks_per_node": ranks}
        )
        proc = subprocess.run(
            [sys.executable, "-m", "reasoning_rl.cli", "sft", str(cfg)],
            cwd=REPO,
            env=env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"),
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        states.append(read_model_state(tmp_path / name / "checkpoints" / "step_2" / "policy"))
        losses.append([r["train/loss"] for r in metrics(tmp_path / name) if "train/loss" in r])
    assert "workers: 2 ranks" in proc.stdout
    assert losses[1] == pytest.approx(losses[0], rel=1e-4) and len(losses[0]) == 2
    for key, a in states[0].items():
        tol = 3e-2 if "k_proj.bias" in key else 1e-5
        assert torch.allclose(a, states[1][key], atol=tol, rtol=0), (key, (a - states[1][key]).abs().max())
