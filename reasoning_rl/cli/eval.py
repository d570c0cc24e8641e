"""Body of ``rrl eval``: a config, or ``--model`` and ``--data`` alone, generated and graded into a table per
data source; user mistakes become one line on stderr and exit code 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

from reasoning_rl.cli.common import fail, make_console, prepare, user_errors
from reasoning_rl.config import Config, ConfigError, load_config


def _eval_config(
    config_path: str | None, overrides: list[str], model: str | None, data: str | None, n: int | None
) -> Config:
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


def eval_command(
    config_path: str | None,
    overrides: list[str],
    *,
    model: str | None,
    data: str | None,
    n: int | None,
    out: str | None,
    step: int | None = None,
) -> int:
    """``rrl eval``; ``model`` may be a model dir, a PEFT adapter dir or a run dir (its checkpoint ``step``)."""
    console = make_console()
    if config_path is not None and "=" in config_path and not Path(config_path).exists():
        overrides, config_path = [config_path, *overrides], None  # `rrl eval --model M --data D key=value`
    try:
        from reasoning_rl.policy.lora import is_adapter_dir
        from reasoning_rl.trainer.run_model import (  # torch: only when evaluating
            is_run_dir,
            model_from_adapter,
            model_from_run,
        )

        if model is not None and is_run_dir(model):
            run = Path(model).resolve()
            model = str(model_from_run(run, step))
            if config_path is None and data is None:  # the run's own config and data, results in the run dir
                config_path, overrides = str(run / "config.yaml"), [f"run.dir={run}", *overrides]
        elif model is not None and is_adapter_dir(model):
            if step is not None:
                raise ConfigError(
                    f"--step picks a checkpoint of a run; {model!r} is a PEFT adapter directory"
                )
            model = str(model_from_adapter(model))
        elif step is not None:
            raise ConfigError(
                f"--step picks a checkpoint of a run: --model must be a run directory (with "
                f"config.yaml and checkpoints/), got {model!r}"
            )
        cfg = _eval_config(config_path, overrides, model, data, n)
        prepare(cfg)
        from reasoning_rl.trainer.eval import run_eval

        result, path = run_eval(cfg, out=Path(out) if out else None, console=console)
    except user_errors() as exc:
        return fail(exc)
    k = cfg.eval.n
    table = Table(title=f"eval: {cfg.model.path}")
    for col in ("data_source", "prompts", "mean_score", f"pass@{k}", f"maj@{k}", "errors"):
        table.add_column(col, justify="right")
    counts: dict[str, int] = {}
    for row in result.rows:
        counts[row["data_source"]] = counts.get(row["data_source"], 0) + 1
    for src, stats in sorted(result.by_source.items()):
        table.add_row(
            src,
            str(counts.get(src, 0)),
            *(f"{stats.get(c, float('nan')):.3f}" for c in ("mean_score", f"pass@{k}", f"maj@{k}")),
            f"{stats.get('errors', 0):.0f}",
        )
    m = result.metrics
    table.add_row(
        "[bold]all",
        str(len(result.rows)),
        *(f"{m.get('eval/' + c, float('nan')):.3f}" for c in ("mean_score", f"pass@{k}", f"maj@{k}")),
        f"{m.get('eval/errors', 0):.0f}",
    )
    console.print(table)
    console.print(f"per-prompt results: {path}")
    return 0
