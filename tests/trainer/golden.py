"""Golden trajectories: seeded CPU tiny-model GRPO and PPO runs, their per-step metrics pinned so a refactor
that changes behaviour fails loudly.

Each run is a real ``rrl train`` (subprocess: the whole loop - sampling, streamed grading, old/ref log-probs,
advantages, update epochs, weight hand-off). What is pinned, per engine (``ENGINES``):

- hf (``tests/assets/golden_grpo.json`` / ``golden_ppo.json``): every variant of ``RUNS`` - cheap (no vLLM
  start-up), so it covers every branch of the update;
- vllm (``golden_grpo_vllm.json`` / ``golden_ppo_vllm.json``): GRPO ``recompute`` and PPO ``gae`` only, on
  vLLM's CPU backend in float32 - the same loop through the engine production uses (its scheduler, its
  sampler, the hand-off into it), at one start-up (~30 s) per run. Rollouts are reproducible because CPU
  runs seed every sample (``rollout.seed_per_sample``, on by default on CPU), pinned here explicitly.

Threads are pinned to 1 so the float32 reductions, and so the trajectory, do not depend on the machine's
core count.

Regenerate ONLY when a change of behaviour is intended (and say why in the commit); each engine's files are
recorded on their own (recording one never rewrites the other's):

    PYTHONPATH=$PWD .venv/bin/python -m tests.trainer.golden                     # hf, both files
    PYTHONPATH=$PWD .venv/bin/python -m tests.trainer.golden grpo                # hf, one of them
    PYTHONPATH=$PWD .venv/bin/python -m tests.trainer.golden --engine vllm       # vllm, both files
    PYTHONPATH=$PWD .venv/bin/python -m tests.trainer.golden --engine vllm ppo   # vllm, one of them
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.trainer.test_train_e2e import config, metrics, train

ASSETS = Path(__file__).resolve().parents[1] / "assets"

# Variants chosen to cover every branch of the update: old log-probs from a recompute, from the policy
# itself (one on-policy update) and from the engine; KL as a loss term and in the reward; mini-batches
# over several epochs; a non-default outcome estimator; the critic + GAE.
BASE = {"rollout": {"engine": "hf", "n": 8, "max_tokens": 6}, "trainer": {"steps": 4, "batch_size": 4}}
RUNS: dict[str, dict[str, dict[str, Any]]] = {
    "grpo": {
        "recompute": {},
        "auto_kl_loss": {"algorithm": {"old_logprobs": "auto", "kl_coef": 0.05}},
        "rollout_kl_reward_epochs": {
            "algorithm": {
                "old_logprobs": "rollout",
                "kl_coef": 0.05,
                "kl_mode": "reward",
                "advantage": "rloo",
                "epochs": 2,
                "mini_batch_size": 16,
            }
        },
    },
    "ppo": {
        "gae": {
            "algorithm": {"name": "ppo", "old_logprobs": "auto"},
            "optim": {"lr": 0.01, "critic_lr": 0.001},
        },
    },
}
# Per engine: its rollout settings over BASE's, and the variants of RUNS it pins (vLLM: one GRPO and the PPO
# run, each paying a vLLM start-up; the update's other branches do not depend on the engine).
ENGINES: dict[str, dict[str, Any]] = {
    "hf": {"engine": "hf"},
    "vllm": {"engine": "vllm", "seed_per_sample": True},
}
PINNED: dict[str, dict[str, tuple[str, ...]]] = {
    "hf": {algo: tuple(variants) for algo, variants in RUNS.items()},
    "vllm": {"grpo": ("recompute",), "ppo": ("gae",)},
}
# What is pinned per step: reward, loss, grad norm (and the critic's for PPO), plus the quantities between
# them, so a mismatch points at the stage that moved.
RTOL, ATOL = 1e-3, 1e-5  # the comparison's tolerance (why: tests/trainer/test_golden.py)
THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # set in the environment the runs inherit
KEYS = (
    "reward/mean",
    "advantage/abs_mean",
    "policy/loss",
    "policy/pg_loss",
    "policy/grad_norm",
    "policy/kl",
    "critic/value_loss",
    "critic/grad_norm",
    "critic/returns_mean",
)


def golden_path(algo: str, engine: str = "hf") -> Path:
    return ASSETS / (f"golden_{algo}.json" if engine == "hf" else f"golden_{algo}_{engine}.json")


def variant_config(
    tmp_path: Path, model: Path, algo: str, variant: str, engine: str = "hf", **extra: dict[str, Any]
) -> Path:
    """The ``rrl train`` config of one variant on ``engine``, ``extra``'s sections over it; its run dir is
    ``tmp_path / f"{algo}-{variant}"``."""
    sections = {k: dict(v) for k, v in BASE.items()}
    sections["rollout"].update(ENGINES[engine])
    for key, value in [*RUNS[algo][variant].items(), *extra.items()]:
        sections[key] = {**sections.get(key, {}), **value}
    return config(tmp_path, model, f"{algo}-{variant}", **sections)


def run_variant(
    tmp_path: Path, model: Path, algo: str, variant: str, engine: str = "hf", **extra: dict[str, Any]
) -> list[dict[str, float]]:
    """Train one variant on ``engine`` (``extra``: config sections that must not change the trajectory, such
    as the ``resources`` of several ranks) and return its per-step pinned metrics (only the KEYS the run
    reports)."""
    train(variant_config(tmp_path, model, algo, variant, engine, **extra), timeout=600)
    rows = [r for r in metrics(tmp_path / f"{algo}-{variant}") if "reward/mean" in r]
    return [{k: float(r[k]) for k in KEYS if k in r} for r in rows]


def assert_golden(got: list[dict[str, float]], algo: str, variant: str, engine: str = "hf") -> None:
    """``got`` (``run_variant``'s rows) is ``engine``'s recorded trajectory: rewards exact, the rest within
    ``RTOL`` / ``ATOL`` (why those: ``tests/trainer/test_golden.py``)."""
    golden = json.loads(golden_path(algo, engine).read_text())["variants"][variant]
    assert golden["overrides"] == RUNS[algo][variant], (
        "the run changed: regenerate (see tests/trainer/golden.py)"
    )
    want = golden["steps"]
    assert len(got) == len(want)
    for step, (g, w) in enumerate(zip(got, want, strict=True), start=1):
        assert g.keys() == w.keys(), f"step {step}: metrics {sorted(g)} != golden {sorted(w)}"
        assert g["reward/mean"] == w["reward/mean"], f"step {step}: rollouts changed ({g} vs {w})"
        bad = {k: (g[k], w[k]) for k in w if not math.isclose(g[k], w[k], rel_tol=RTOL, abs_tol=ATOL)}
        assert not bad, f"{engine} {algo}/{variant} step {step}: (got, golden) {bad}"


def record(algo: str, engine: str, tmp_path: Path, model: Path) -> dict[str, Any]:
    flag = "" if engine == "hf" else f"--engine {engine} "
    out: dict[str, Any] = {
        "regenerate": f"PYTHONPATH=$PWD .venv/bin/python -m tests.trainer.golden {flag}{algo}",
        "base": {**BASE, "rollout": {**BASE["rollout"], **ENGINES[engine]}},
        "variants": {},
    }
    for variant in PINNED[engine][algo]:
        out["variants"][variant] = {
            "overrides": RUNS[algo][variant],
            "steps": run_variant(tmp_path, model, algo, variant, engine),
        }
    return out


def main(argv: list[str]) -> None:
    import argparse

    from reasoning_rl.tiny import build_tiny_model

    parser = argparse.ArgumentParser(prog="python -m tests.trainer.golden", description=__doc__)
    parser.add_argument("--engine", choices=sorted(ENGINES), default="hf")
    parser.add_argument("algos", nargs="*", help=f"of {sorted(RUNS)}; none: all the engine pins")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.algos) - set(PINNED[args.engine]))
    if unknown:  # not choices=: Python 3.11's argparse refuses an empty nargs="*" list against them
        parser.error(f"unknown algorithms {unknown}; {args.engine} pins {sorted(PINNED[args.engine])}")
    os.environ.update(THREADS)
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model(Path(tmp) / "tiny_model")
        for algo in args.algos or list(PINNED[args.engine]):
            data = record(algo, args.engine, Path(tmp), model)
            path = golden_path(algo, args.engine)
            ASSETS.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data, indent=1) + "\n")
            print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
