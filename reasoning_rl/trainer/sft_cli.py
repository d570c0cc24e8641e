"""Body of ``rrl sft``, and what lets ``rrl train`` start from an SFT result: user mistakes are one line, exit 2."""

from __future__ import annotations

import sys

from reasoning_rl.config import ConfigError, config_text, load_config
from reasoning_rl.trainer.cli import _fail, _user_errors, make_console, prepare, single_process_error
from reasoning_rl.trainer.resume import TrainError


def sft_command(config_path: str, overrides: list[str], *, print_config: bool = False) -> int:
    """``rrl sft``; ``print_config``: the resolved config as YAML, then exit."""
    refused = single_process_error()
    if refused is not None:
        return _fail(TrainError(refused.replace("rrl train", "rrl sft")))
    console = make_console()
    try:
        cfg = load_config(config_path, overrides)
    except ConfigError as exc:
        return _fail(exc)
    if print_config:
        sys.stdout.write(config_text(cfg))
        return 0
    prepare(cfg)
    from reasoning_rl.distributed.faults import WorkerFailure
    from reasoning_rl.trainer.sft import SftTrainer

    trainer = SftTrainer(cfg, console=console)
    try:
        summary = trainer.run()
    except KeyboardInterrupt:
        console.print(f"interrupted after step {trainer.completed_step}; resume with trainer.resume=auto")
        return 130
    except _user_errors() as exc:
        return _fail(exc)
    except WorkerFailure as exc:
        return _fail(exc, code=1)
    console.print(f"done: {summary.steps} SFT steps, run dir {summary.run_dir}")
    return 0
