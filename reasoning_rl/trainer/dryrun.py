"""``rrl train --dry-run``: everything a run checks before its first step, without loading weights or training.

Config (already validated by the caller), model path and tokenizer, every data row (read, routed and rendered
through the prompt template), each routed grader and its ``grading.options``, and the doctor's required checks.
The first problem raises one of the trainer's user errors, so the CLI prints one line and exits 2.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from graders.runtime import resolve_grader
from reasoning_rl.config import Config, ConfigError
from reasoning_rl.data import Example
from reasoning_rl.policy.model import check_model_path, load_tokenizer
from reasoning_rl.trainer.collect import RewardPlan
from reasoning_rl.trainer.resume import TrainError


def _check_graders(cfg: Config, examples: list[Example]) -> list[str]:
    """Load each grader the data routes to (every reward component's) and check its options (a bad option
    would mask every sample) and the context fields it declares (each row must have them)."""
    rewards = RewardPlan(cfg.grading)
    terms = {(t.name, t.grader): t for ex in examples for t in rewards.terms(ex)}
    specs = sorted({t.grader for t in terms.values()} | set(cfg.grading.options))
    checks = [(f"grading.options.{spec}", spec, cfg.grading.options.get(spec, {})) for spec in specs]
    if rewards.composed:
        checks += [(f"reward component {t.name!r} ({t.grader})", t.grader, t.options) for t in terms.values()]
    for where, spec, options in checks:
        try:
            grader: Any = resolve_grader(spec)
        except Exception as exc:  # an import error in a plugin names the plugin, not a traceback
            raise ConfigError(f"grader {spec!r} cannot be loaded: {type(exc).__name__}: {exc}") from exc
        check = getattr(grader, "check_options", None)
        if check is not None:
            try:
                check(dict(options))
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{where}: {exc}") from exc
    rewards.check(examples)
    return specs


def dry_run(cfg: Config, console: Console) -> None:
    """Validate what ``cfg`` names; print what was checked. Raises a user error at the first problem."""
    from reasoning_rl.doctor import blocking, run_checks
    from reasoning_rl.trainer.build import load_data

    check_model_path(cfg.model.path, cfg.model.gguf_file)
    tokenizer = load_tokenizer(
        cfg.model.path, gguf_file=cfg.model.gguf_file, require_chat_template=cfg.data.chat_template is True
    )
    console.print(f"model: {cfg.model.path} (tokenizer loads)")
    train, val = load_data(cfg, tokenizer, console)
    specs = _check_graders(cfg, [p.example for p in train + val])
    console.print(f"graders: {', '.join(specs)} (load; options accepted)")
    if cfg.run.doctor:
        stops = blocking(run_checks(cfg, essential_only=True))
        if stops:
            raise TrainError("doctor: " + "; ".join(f"{r.name}: {r.detail} ({r.fix})" for r in stops))
        console.print("doctor: required checks pass")
    console.print(f"dry run ok: {cfg.run_dir} would be written; nothing was trained")
