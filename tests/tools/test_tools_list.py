"""``rrl tools list`` (issue 30 item 10: there was none): every name ``rollout.tools`` accepts, with where it
comes from; failed on main 5090d93 (no such command)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from reasoning_rl.cli.app import app
from reasoning_rl.tools import register, tool, unregister

runner = CliRunner()


def test_tools_list_shows_builtins_and_in_process_registrations() -> None:
    @tool()
    def lookup_constant(key: str) -> str:
        """Look up a physical constant by name."""
        return key

    register(lookup_constant)
    try:
        res = runner.invoke(app, ["tools", "list", "--json"])
    finally:
        unregister("lookup_constant")
    assert res.exit_code == 0, res.output
    infos = {info["name"]: info for info in json.loads(res.stdout)}
    assert {"python", "calculator", "lookup_constant"} <= set(infos)
    assert infos["python"]["provider"] == "reasoning-rl (built-in)" and infos["python"]["status"] == "ok"
    assert infos["lookup_constant"]["description"] == "Look up a physical constant by name."
    table = runner.invoke(app, ["tools", "list"], terminal_width=200)
    assert table.exit_code == 0 and "calculator" in table.stdout and "python" in table.stdout
