"""Body of ``rrl train``: user mistakes become one line on stderr and exit code 2, a broken guarantee or a lost
rank exit code 1."""

from __future__ import annotations

from reasoning_rl.cli.common import fail, make_console, run_config, user_errors
from reasoning_rl.config import ConfigError


def train_command(
    config_path: str,
    overrides: list[str],
    *,
    print_config: bool = False,
    dry_run: bool = False,
    plan_for: str | None = None,
) -> int:
    """``rrl train``; ``print_config``: the resolved config as YAML, then exit; ``dry_run``: check, no training;
    ``plan_for``: the dry run's resources and memory plan for that target's GPUs instead of this machine's."""
    target = None
    if plan_for is not None:
        from reasoning_rl.memory_plan.targets import find_target

        try:
            if not dry_run:
                raise ConfigError(f"--plan-for {plan_for} plans a run without training: add --dry-run")
            target = find_target(plan_for)
        except ConfigError as exc:
            return fail(exc)
    cfg = run_config("rrl train", config_path, overrides, print_config=print_config)
    if isinstance(cfg, int):
        return cfg
    console = make_console()
    from reasoning_rl.trainer.start_model import with_start_model

    try:  # model.path = an `rrl sft` (or `rrl train`) run dir or a PEFT adapter dir: the model it holds
        cfg, overrides = with_start_model(cfg, config_path, overrides)
    except user_errors() as exc:
        return fail(exc)
    if dry_run:
        from reasoning_rl.trainer.dryrun import dry_run as check_run

        try:
            check_run(cfg, console, target)
        except user_errors() as exc:
            return fail(exc)
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
    except user_errors() as exc:
        return fail(exc)
    except (
        WeightSyncError,
        SelftestError,
        WorkerFailure,
    ) as exc:  # a broken guarantee or a lost rank, not a user mistake: exit 1, still one line
        return fail(exc, code=1)
    console.print(f"done: {summary.steps} steps, run dir {summary.run_dir}")
    return 0
