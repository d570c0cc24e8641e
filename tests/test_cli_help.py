"""`rrl --help`: every documented default is shown, and -h works like --help."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from reasoning_rl.cli.app import app


@pytest.mark.parametrize(
    ("command", "default"),
    [
        (["report"], "[default: RUN_DIR/report/report.html]"),
        (["eval"], "[default: RUN_DIR/eval/results.jsonl]"),
        (["export"], "[default: RUN_DIR/export/step_N]"),
        (["export"], "[default: latest complete]"),
        (["grade"], "default: OUTPUT.cache.sqlite"),
        (["sandbox", "build"], "(default: deb.debian.org)"),
    ],
)
def test_help_keeps_documented_defaults(command: list[str], default: str) -> None:
    """Before: rich markup took "[default: ...]" for a style tag and dropped it."""
    result = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert default in " ".join(result.output.split()), result.output


@pytest.mark.parametrize("command", [[], ["train"], ["export"], ["graders", "list"], ["sandbox", "check"]])
def test_dash_h_is_help(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "-h"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
