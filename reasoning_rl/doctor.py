"""``rrl doctor``: check this machine against what a run needs, before anything heavy is loaded.

``run_checks(config)`` returns one ``CheckResult`` per line; a result is ``required`` when the given config
needs it, and any required ``problem`` makes ``rrl doctor CONFIG`` exit non-zero and ``rrl train`` stop early
(``doctor_or_exit``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from graders.evaluation.streams import results_console
from reasoning_rl.doctor_checks import CHECKS, CheckResult, Requirements, requirements_from_config

__all__ = ["CheckResult", "doctor_or_exit", "load_config_mapping", "render", "run_checks"]

STATUS_STYLE = {
    "ok": "[green]OK[/green]",
    "warn": "[yellow]warn[/yellow]",
    "problem": "[bold red]PROBLEM[/bold red]",
}


class ConfigError(ValueError):
    """The config file cannot be read; the message names the file and the reason."""


def load_config_mapping(config: Any, overrides: list[str] | None = None) -> Mapping[str, Any]:
    """A config path (validated and resolved by ``reasoning_rl.config``, with ``rrl train``'s dotted
    overrides), a mapping, or a config model."""
    if isinstance(config, str | Path):
        from reasoning_rl import config as config_mod

        try:
            config = config_mod.load_config(config, overrides)
        except config_mod.ConfigError as exc:
            raise ConfigError(str(exc)) from exc
    if isinstance(config, Mapping):
        return config
    dump = getattr(config, "model_dump", None)
    if dump is not None:
        result: Mapping[str, Any] = dump(mode="json")
        return result
    raise ConfigError(f"cannot read a config from {type(config).__name__}")


def run_checks(
    config: Any = None, overrides: list[str] | None = None, *, essential_only: bool = False
) -> list[CheckResult]:
    """Run every registered check; ``config`` (path, mapping or config model) decides what is required.
    ``essential_only`` skips slow probes (a sandbox run) that the config cannot require."""
    if config is None and overrides:
        raise ConfigError("overrides need a config file: rrl doctor CONFIG.yaml key.path=value ...")
    req = (
        Requirements() if config is None else requirements_from_config(load_config_mapping(config, overrides))
    )
    req = replace(req, essential_only=essential_only)
    results: list[CheckResult] = []
    for name, (_, check) in sorted(CHECKS.items(), key=lambda item: item[1][0]):
        try:
            results.extend(check(req))
        except Exception as exc:  # a broken probe is one problem line, never a traceback instead of the table
            results.append(
                CheckResult(
                    name,
                    "problem",
                    f"the check itself failed: {type(exc).__name__}: {exc}",
                    "report this as a bug in `rrl doctor`",
                )
            )
    return results


def render(results: list[CheckResult], console: Console | None = None) -> None:
    table = Table(title="rrl doctor", show_lines=False)
    for column in ("check", "status", "detail", "how to fix"):
        table.add_column(column, overflow="fold")
    for r in results:
        status = STATUS_STYLE[r.status] + (" (required)" if r.required and r.status != "ok" else "")
        table.add_row(Text(r.name), status, Text(r.detail), Text(r.fix))  # Text: '[train-cpu]' is not markup
    (console or results_console()).print(table)


def blocking(results: list[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.blocking]


def doctor_or_exit(config: Any) -> list[CheckResult]:
    """For ``rrl train``: run the checks, and stop with the doctor's table when something required is missing."""
    results = run_checks(config, essential_only=True)
    stops = blocking(results)
    if stops:
        console = results_console(stderr=True)  # unwrapped when redirected (a log file is not 80 columns)
        render(stops, console)
        console.print(
            f"[bold red]{len(stops)} required check(s) failed[/bold red]; run `rrl doctor CONFIG` for all"
        )
        sys.exit(1)
    return results
