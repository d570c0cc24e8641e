"""Bodies of ``rrl train`` and ``rrl eval``: user mistakes become one clear message and exit code 2."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from reasoning_rl.config import Config, ConfigError, config_text, load_config
from reasoning_rl.lean_default import default_lean_launcher
from reasoning_rl.trainer.resume import TrainError

NON_TTY_WIDTH = 1000


def _user_errors() -> tuple[type[Exception], ...]:
    from reasoning_rl.data import DataError
    from reasoning_rl.policy.model import ModelLoadError
    from reasoning_rl.rollout.base import RolloutError

    return (ConfigError, DataError, ModelLoadError, RolloutError, TrainError, FileNotFoundError)


def _fail(exc: Exception, code: int = 2) -> int:
    """One message on stderr (stdout may be the run's log or a pipe); exit code 2 for a user mistake, 1 for a
    broken guarantee (freshness gate, grader selftest). Escaped: tensor names and paths may hold ``[...]``."""
    from rich.markup import escape

    Console(stderr=True, soft_wrap=True).print(
        f"[bold red]error:[/bold red] {escape(str(exc))}", highlight=False
    )
    return code


def make_console() -> Console:
    """The run's stdout console. Not a terminal (a log file, nohup, SLURM, a pipe): lines are not wrapped at
    rich's default 80 columns, so one progress line stays one line."""
    if sys.stdout.isatty():
        return Console()
    return Console(soft_wrap=True, width=NON_TTY_WIDTH)


def single_process_error() -> str | None:
    """``torchrun --nproc_per_node=N rrl train`` would run N full copies of the run into one run dir."""
    world = os.environ.get("WORLD_SIZE", "1")
    if not world.isdigit() or int(world) <= 1:
        return None
    return (
        f"rrl train runs as a single training process, but WORLD_SIZE={world} (torchrun?): every rank would "
        "train a full copy of the run into the same run dir. Run `rrl train CONFIG` once, without torchrun: "
        "it starts its own ranks (resources.ranks_per_node, default every visible GPU; resources.nodes for "
        "several machines)"
    )


# What a run sets when its output goes to a file or pipe (nohup, SLURM, `> log`): no progress bars (tqdm's,
# Hugging Face's, datasets'), whose carriage-return redraws become one line per refresh, and no Ray usage-stats
# banner. A terminal keeps them; a value the user set wins.
REDIRECTED_ENV = {
    "TQDM_DISABLE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def redirected() -> bool:
    """stdout or stderr is not a terminal."""
    return not (sys.stdout.isatty() and sys.stderr.isatty())


# What a quiet run sets; ``logging.engine_logs`` (``--verbose``) clears these values again, since an earlier quiet
# command in the same process (or a parent that inherited them) would otherwise keep the engine silent.
QUIET_ENV = {"VLLM_LOGGING_LEVEL": "ERROR", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def config_specs(cfg: Config) -> list[str]:
    """Every grader and tool a config names (``module:attr`` ones load from the working directory)."""
    terms = [*cfg.grading.rewards, *(t for ts in cfg.grading.source_rewards.values() for t in ts)]
    graders = [cfg.data.default_grader, *cfg.data.grader_map.values(), *(t.grader or "" for t in terms)]
    return [*graders, *cfg.rollout.tools]


def quiet_outside_a_terminal() -> None:
    """For commands without a run config (``rrl export``): output going to a file or pipe gets no progress
    bars, no engine INFO lines (vLLM's Triton / NUMA notes at import) and no library FutureWarnings."""
    if not redirected():
        return
    for key, value in {**QUIET_ENV, **REDIRECTED_ENV}.items():
        os.environ.setdefault(key, value)
    warnings.filterwarnings("ignore", category=FutureWarning)


def prepare(cfg: Config) -> None:
    """Process-wide settings a command applies before anything heavy is imported."""
    if not cfg.logging.engine_logs:
        # vLLM's ~50 INFO/WARNING lines per run (engine config, compile, and two "Failed to load weights" per
        # hand-off, which are harmless: see VLLMEngine.load_weights) and transformers' load/save bars would bury
        # the run's own lines.
        for key, value in QUIET_ENV.items():
            os.environ.setdefault(key, value)
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm\.")  # torch API deprecations
    else:
        for key, value in QUIET_ENV.items():
            if os.environ.get(key) == value:
                del os.environ[key]
    from graders.runtime import importable_from_cwd

    importable_from_cwd(config_specs(cfg))  # module:attr graders and tools from the working directory
    if redirected():  # after the quiet settings: --verbose shows the engine's lines, never a redrawn bar
        for key, value in REDIRECTED_ENV.items():
            os.environ.setdefault(key, value)
    default_lean_launcher(cfg)


def train_command(
    config_path: str, overrides: list[str], *, print_config: bool = False, dry_run: bool = False
) -> int:
    """``rrl train``; ``print_config``: the resolved config as YAML, then exit; ``dry_run``: check, no training."""
    refused = single_process_error()
    if refused is not None:
        return _fail(TrainError(refused))
    console = make_console()
    try:
        cfg = load_config(config_path, overrides)
    except ConfigError as exc:
        return _fail(exc)
    if print_config:
        sys.stdout.write(config_text(cfg))
        return 0
    prepare(cfg)
    from reasoning_rl.trainer.start_model import with_start_model

    try:  # model.path = an `rrl sft` (or `rrl train`) run dir or a PEFT adapter dir: the model it holds
        cfg, overrides = with_start_model(cfg, config_path, overrides)
    except _user_errors() as exc:
        return _fail(exc)
    if dry_run:
        from reasoning_rl.trainer.dryrun import dry_run as check_run

        try:
            check_run(cfg, console)
        except _user_errors() as exc:
            return _fail(exc)
        return 0
    if cfg.run.doctor:
        from reasoning_rl.doctor import doctor_or_exit

        doctor_or_exit(cfg)  # stops here with the doctor's table when something required is missing
    from graders.selftest import SelftestError
    from reasoning_rl.distributed.faults import WorkerFailure
    from reasoning_rl.freshness import WeightSyncError
    from reasoning_rl.trainer.loop import Trainer

    trainer = Trainer(cfg, console=console)
    try:
        summary = trainer.run()
    except KeyboardInterrupt:
        from reasoning_rl.trainer.interrupt import interrupted_message

        for line in interrupted_message(cfg, trainer.completed_step, config_path, overrides):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        return 130
    except _user_errors() as exc:
        return _fail(exc)
    except (
        WeightSyncError,
        SelftestError,
        WorkerFailure,
    ) as exc:  # a broken guarantee or a lost rank, not a user mistake: exit 1, still one line
        return _fail(exc, code=1)
    console.print(f"done: {summary.steps} steps, run dir {summary.run_dir}")
    return 0


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
    except _user_errors() as exc:
        return _fail(exc)
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
