"""What the command bodies share: user mistakes as one line on stderr (exit 2), the run's console, the process
settings applied before anything heavy is imported, and the config prologue of ``rrl train`` and ``rrl sft``."""

from __future__ import annotations

import logging
import os
import sys
import warnings

from rich.console import Console

from reasoning_rl.config import Config, ConfigError, config_text, load_config
from reasoning_rl.lean_default import default_lean_launcher
from reasoning_rl.trainer.resume import TrainError

NON_TTY_WIDTH = 1000


def user_errors() -> tuple[type[Exception], ...]:
    """What a command reports as the user's mistake (one line, exit 2); imported here, late: the model and
    engine modules pull in torch."""
    from reasoning_rl.data import DataError
    from reasoning_rl.policy.model import ModelLoadError
    from reasoning_rl.rollout.base import RolloutError

    return (ConfigError, DataError, ModelLoadError, RolloutError, TrainError, FileNotFoundError)


def fail(exc: Exception, code: int = 2) -> int:
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


def single_process_error(command: str) -> str | None:
    """``torchrun --nproc_per_node=N rrl train`` (``command``) would run N full copies of the run into one run
    dir."""
    world = os.environ.get("WORLD_SIZE", "1")
    if not world.isdigit() or int(world) <= 1:
        return None
    return (
        f"{command} runs as a single training process, but WORLD_SIZE={world} (torchrun?): every rank would "
        f"train a full copy of the run into the same run dir. Run `{command} CONFIG` once, without torchrun: "
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


def quiet_engine_logger(quiet: bool) -> None:
    """vLLM's loggers have no handler until an engine configures them (from ``VLLM_LOGGING_LEVEL``), so what they
    say before that, at import (on a CPU box "Triton is installed, but doesn't include CPU backend"), went to
    Python's last-resort handler whatever the variable said: a quiet process sets the level on the logger itself.
    ``quiet=False`` undoes only that (a level someone else set stays)."""
    engine = logging.getLogger("vllm")
    if quiet:
        engine.setLevel(logging.ERROR)
    elif engine.level == logging.ERROR:
        engine.setLevel(logging.NOTSET)


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
    quiet_engine_logger(True)
    warnings.filterwarnings("ignore", category=FutureWarning)


def prepare(cfg: Config) -> None:
    """Process-wide settings a command applies before anything heavy is imported."""
    if not cfg.logging.engine_logs:
        # vLLM's ~50 INFO/WARNING lines per run (engine config, compile, and two "Failed to load weights" per
        # hand-off, which are harmless: see VLLMEngine.load_weights) and transformers' load/save bars would bury
        # the run's own lines.
        for key, value in QUIET_ENV.items():
            os.environ.setdefault(key, value)
        quiet_engine_logger(True)
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm\.")  # torch API deprecations
    else:
        for key, value in QUIET_ENV.items():
            if os.environ.get(key) == value:
                del os.environ[key]
        quiet_engine_logger(False)
    from graders.runtime import importable_from_cwd

    importable_from_cwd(config_specs(cfg))  # module:attr graders and tools from the working directory
    if redirected():  # after the quiet settings: --verbose shows the engine's lines, never a redrawn bar
        for key, value in REDIRECTED_ENV.items():
            os.environ.setdefault(key, value)
    default_lean_launcher(cfg)


def run_config(command: str, config_path: str, overrides: list[str], *, print_config: bool) -> Config | int:
    """The prologue of ``rrl train`` and ``rrl sft`` (``command``): refuse torchrun, load the config, with
    ``print_config`` write it as YAML and stop, else apply the process settings (``prepare``). An int is the
    command's exit code: 2 for a mistake (one line), 0 after printing the config."""
    refused = single_process_error(command)
    if refused is not None:
        return fail(TrainError(refused))
    try:
        cfg = load_config(config_path, overrides)
    except ConfigError as exc:
        return fail(exc)
    if print_config:
        sys.stdout.write(config_text(cfg))
        return 0
    prepare(cfg)
    return cfg
