"""Small seeded tiny-model ``rrl train`` runs for the distributed tests, and how to compare two of them.

The runs are chosen so the split over ranks is uneven: 3 prompts (generation 2 + 1 over two ranks) x 6
samples = 18 rows, and GRPO's two mini-batches of 9 rows each split 5 + 4.

Tolerance (float32 on CPU, one thread per process): with two ranks FSDP2 reduce-scatters each rank's
gradient and both all-reduce the loss sums, so the additions happen in another order than in one process:
~1e-7 relative per reduction. Three Adam steps carry that to ~1e-5 in losses and gradient norms (the two-process
FSDP2 step test in tests/rl/test_fsdp.py already holds at 1e-5 after one step), so ``RTOL = 1e-4`` gives a
10x margin while any real difference (a row counted twice, a wrong normaliser, a lost shard: all >= 1 / 18
of the batch) moves the loss by percent. Rewards are a discrete function of the sampled tokens: equal, or the
split changed what was sampled. Weights: within ``WEIGHT_ATOL`` = 1e-5 (a few float32 ulps of lr x steps); a key
projection's bias has an exactly-zero gradient in theory (softmax is shift-invariant) and reduction-order noise
in practice, which Adam's normalisation turns into an arbitrary update below lr per step: compared at 3 x lr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
GRADERS = REPO / "tests" / "trainer"  # task_graders:ContainsAnswer
RTOL = 1e-4
ATOL = 1e-6
WEIGHT_ATOL = 1e-5
LR = 0.01
STEPS = 3
KEYS = (
    "policy/loss",
    "policy/pg_loss",
    "policy/grad_norm",
    "policy/kl",
    "advantage/abs_mean",
    "critic/value_loss",
    "critic/grad_norm",
    "critic/returns_mean",
)

VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "grpo": {"algorithm": {"old_logprobs": "recompute", "kl_coef": 0.05, "mini_batch_size": 9}},
    "ppo": {"algorithm": {"name": "ppo", "old_logprobs": "auto"}, "optim": {"lr": LR, "critic_lr": 0.001}},
}


def env(*paths: Path) -> dict[str, str]:
    """One thread per process (reproducible float32 sums); the test graders (and ``paths``: a test's plugins)
    importable by every worker."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(map(str, (*paths, GRADERS, REPO))),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "RAY_DEDUP_LOGS": "0",
    }


def one_node_cluster(monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]) -> Iterator[Any]:
    """A one-node Ray cluster (3 CPUs) started with ``environment`` (the runs' own, never a driver's
    ``RRL_FAULT``), which reaps the actors of a driver killed mid-run; shut down after the test."""
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 3, "include_dashboard": False}
    )
    try:
        yield cluster
    finally:
        cluster.shutdown()


def write_config(tmp: Path, model: Path, name: str, algo: str, **resources: Any) -> Path:
    cfg: dict[str, Any] = {
        "run": {"name": name, "dir": str(tmp / name), "doctor": False, "seed": 0, "device": "cpu"},
        "model": {"path": str(model)},
        "data": {
            "train": {"generator": "fixed_digit", "size": 12},
            "default_grader": "task_graders:ContainsAnswer",
        },
        "rollout": {"engine": "hf", "n": 6, "max_tokens": 6, "temperature": 1.0},
        "optim": {"lr": LR},
        "trainer": {
            "steps": STEPS,
            "batch_size": 3,
            "export": False,
            "checkpoint_every": 1,
            "keep_checkpoints": 3,
        },
        "grading": {"workers": 1, "cache": False},
        "logging": {"console": "plain", "tensorboard": False},
        "resources": resources,
    }
    for key, value in VARIANTS[algo].items():
        cfg[key] = {**cfg.get(key, {}), **value}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def train_cmd(cfg: Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "reasoning_rl.cli", "train", str(cfg), *overrides]


def train(
    cfg: Path, *overrides: str, timeout: float = 1200, paths: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """One ``rrl train`` run that must succeed (``paths``: put first on its workers' import path). ``timeout``
    only stops a hung run: a 2-core runner with two busy processes beside it took over 420 s (the old guard)
    for one such run (issue 41: no test may depend on load)."""
    proc = subprocess.run(
        train_cmd(cfg, *overrides), cwd=REPO, env=env(*paths), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def step_metrics(run: Path) -> list[dict[str, float]]:
    """One row per step (a resumed run re-logs the steps after its checkpoint: the last row counts)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    by_step = {int(r["step"]): r for r in rows if "reward/mean" in r}
    return [by_step[s] for s in sorted(by_step)]


def final_weights(run: Path, step: int = STEPS) -> dict[str, Any]:
    from reasoning_rl.policy.sharded import read_model_state

    state: dict[str, Any] = read_model_state(run / "checkpoints" / f"step_{step}" / "policy")
    return state


def assert_same_run(got: Path, want: Path, *, steps: int = STEPS) -> None:
    """Per-step rewards equal, losses / grad norms within RTOL, final weights within WEIGHT_ATOL."""
    a, b = step_metrics(got), step_metrics(want)
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, steps + 1))
    for ra, rb in zip(a, b, strict=True):
        assert ra["reward/mean"] == rb["reward/mean"], f"step {ra['step']}: rollouts differ"
        keys = [k for k in KEYS if k in rb]
        assert "policy/loss" in keys and all(k in ra for k in keys), sorted(ra)
        bad = {k: (ra[k], rb[k]) for k in keys if ra[k] != pytest.approx(rb[k], rel=RTOL, abs=ATOL)}
        assert not bad, f"step {ra['step']}: (got, want) {bad}"
    wa, wb = final_weights(got, steps), final_weights(want, steps)
    assert wa.keys() == wb.keys()
    for name, p in wb.items():
        atol = 3 * LR if name.endswith("k_proj.bias") else WEIGHT_ATOL
        diff = float((wa[name] - p).abs().max())
        assert diff <= atol, (name, diff)
    first = final_weights(want, 1)
    trained = max(float((p - first[name]).abs().max()) for name, p in wb.items())
    assert (
        trained > 100 * WEIGHT_ATOL
    )  # the steps after the first moved the weights: the comparison means something
