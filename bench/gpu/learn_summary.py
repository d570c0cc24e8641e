"""Summarise the GPU learning run: reward curve + held-out accuracy before/after, as JSON, a table and PNGs.

python bench/gpu/learn_summary.py RUN_DIR OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    run_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [(r["step"], r["reward/mean"]) for r in rows if "reward/mean" in r]
    # eval/<source>/mean_score (eval/<source>/accuracy in runs recorded before it was renamed)
    name = "mean_score" if any(k.endswith("/mean_score") for r in rows for k in r) else "accuracy"
    evals = [r for r in rows if any(k.startswith("eval/") and k.endswith(f"/{name}") for k in r)]
    sources = sorted(
        {k.split("/")[1] for r in evals for k in r if k.count("/") == 2 and k.endswith(f"/{name}")}
    )
    curves = {
        s: [(r["step"], r[f"eval/{s}/{name}"]) for r in evals if f"eval/{s}/{name}" in r] for s in sources
    }
    summary = {
        "steps": len(train),
        "reward_first5": sum(v for _, v in train[:5]) / max(1, len(train[:5])),
        "reward_last5": sum(v for _, v in train[-5:]) / max(1, len(train[-5:])),
        "eval": {
            s: {"before": c[0][1], "after": c[-1][1], "n_points": len(c)} for s, c in curves.items() if c
        },
        "rollout_logprob_diff_mean_max": max(
            (r["rollout/logprob_diff_mean"] for r in rows if "rollout/logprob_diff_mean" in r), default=None
        ),
        "step_s_median": sorted(r["time/step_s"] for r in rows if "time/step_s" in r)[len(train) // 2]
        if train
        else None,
        "reward_curve": train,
        "eval_curves": curves,
    }
    (out / "learn.json").write_text(json.dumps(summary, indent=1))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    if train:
        axes[0].plot(*zip(*train, strict=True), marker=".")
    axes[0].set(title="training reward (mean, GRPO, SmolLM2-135M)", xlabel="step", ylabel="reward")
    for s, c in curves.items():
        axes[1].plot(*zip(*c, strict=True), marker="o", label=s)
    axes[1].set(title="held-out accuracy (greedy)", xlabel="step", ylabel="accuracy")
    axes[1].legend()
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "learn_curves.png", dpi=110)
    print(
        json.dumps({k: v for k, v in summary.items() if k not in ("reward_curve", "eval_curves")}, indent=1)
    )


if __name__ == "__main__":
    main()
