"""Bodies of ``rrl train`` and ``rrl eval``: user mistakes become one clear message and exit code 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from reasoning_rl.config import Config, ConfigError, load_config


def _user_errors() -> tuple[type[Exception], ...]:
    from reasoning_rl.data import DataError
    from reasoning_rl.policy.model import ModelLoadError
    from reasoning_rl.rollout.base import RolloutError
    from reasoning_rl.trainer.loop import TrainError

    return (ConfigError, DataError, ModelLoadError, RolloutError, TrainError, FileNotFoundError)


def _fail(console: Console, exc: Exception) -> int:
    console.print(f"[bold red]error:[/bold red] {exc}", highlight=False)
    return 2


def train_command(config_path: str, overrides: list[str]) -> int:
    console = Console()
    try:
        cfg = load_config(config_path, overrides)
    except ConfigError as exc:
        return _fail(console, exc)
    if cfg.run.doctor:
        from reasoning_rl.doctor import doctor_or_exit

        doctor_or_exit(cfg)  # stops here with the doctor's table when something required is missing
    from graders.selftest import SelftestError
    from reasoning_rl.freshness import WeightSyncError
    from reasoning_rl.trainer.loop import Trainer

    try:
        summary = Trainer(cfg, console=console).run()
    except _user_errors() as exc:
        return _fail(console, exc)
    except (WeightSyncError, SelftestError) as exc:  # a broken guarantee, not a user mistake: exit 1, still one clear line
        from rich.markup import escape

        console.print(f"[bold red]error:[/bold red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 1
    console.print(f"done: {summary.steps} steps, run dir {summary.run_dir}")
    return 0


def _eval_config(config_path: str | None, overrides: list[str], model: str | None, data: str | None,
                 n: int | None) -> Config:
    base: dict[str, Any] = {}
    if config_path is None:
        if model is None or data is None:
            raise ConfigError("rrl eval needs CONFIG.yaml, or both --model and --data")
        base = {"run": {"name": "eval"}, "model": {"path": model}, "data": {"train": {"path": data}}}
    extra = list(overrides)
    if model is not None and config_path is not None:
        extra.append(f"model.path={model}")
    if data is not None and config_path is not None:
        extra.append(f"data.val=[{{path: '{data}'}}]")
    if n is not None:
        extra.append(f"eval.n={n}")
    return load_config(config_path, extra, base=base)


def eval_command(config_path: str | None, overrides: list[str], *, model: str | None, data: str | None,
                 n: int | None, out: str | None) -> int:
    console = Console()
    if config_path is not None and "=" in config_path and not Path(config_path).exists():
        overrides, config_path = [config_path, *overrides], None  # `rrl eval --model M --data D key=value`
    try:
        cfg = _eval_config(config_path, overrides, model, data, n)
        from reasoning_rl.trainer.eval import run_eval

        result, path = run_eval(cfg, out=Path(out) if out else None, console=console)
    except _user_errors() as exc:
        return _fail(console, exc)
    k = cfg.eval.n
    table = Table(title=f"eval: {cfg.model.path}")
    for col in ("data_source", "prompts", "accuracy", f"pass@{k}", f"maj@{k}", "errors"):
        table.add_column(col, justify="right")
    counts: dict[str, int] = {}
    for row in result.rows:
        counts[row["data_source"]] = counts.get(row["data_source"], 0) + 1
    for src, stats in sorted(result.by_source.items()):
        table.add_row(src, str(counts.get(src, 0)), *(f"{stats.get(c, float('nan')):.3f}" for c in
                                                      ("accuracy", f"pass@{k}", f"maj@{k}")),
                      f"{stats.get('errors', 0):.0f}")
    m = result.metrics
    table.add_row("[bold]all", str(len(result.rows)), *(f"{m.get('eval/' + c, float('nan')):.3f}" for c in
                                                        ("accuracy", f"pass@{k}", f"maj@{k}")),
                  f"{m.get('eval/errors', 0):.0f}")
    console.print(table)
    console.print(f"per-prompt results: {path}")
    return 0
