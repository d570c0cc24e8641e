"""Body of ``rrl sft``: user mistakes are one line on stderr and exit code 2, a lost rank exit code 1."""

from __future__ import annotations

from reasoning_rl.cli.common import fail, make_console, run_config, user_errors


def sft_command(config_path: str, overrides: list[str], *, print_config: bool = False) -> int:
    """``rrl sft``; ``print_config``: the resolved config as YAML, then exit."""
    cfg = run_config("rrl sft", config_path, overrides, print_config=print_config)
    if isinstance(cfg, int):
        return cfg
    console = make_console()
    from reasoning_rl.distributed.faults import WorkerFailure
    from reasoning_rl.trainer.sft import SftTrainer

    trainer = SftTrainer(cfg, console=console)
    try:
        summary = trainer.run()
    except KeyboardInterrupt:
        console.print(f"interrupted after step {trainer.completed_step}; resume with trainer.resume=auto")
        return 130
    except user_errors() as exc:
        return fail(exc)
    except WorkerFailure as exc:
        return fail(exc, code=1)
    console.print(f"done: {summary.steps} SFT steps, run dir {summary.run_dir}")
    return 0
