"""``rrl tools list``. Only typer is imported here; the listing is imported when the command runs."""

from __future__ import annotations

import json

import typer

tools_app = typer.Typer(help="Tools for multi-turn rollouts (rollout.tools).", no_args_is_help=True)


@tools_app.command("list")
def list_command(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show every tool `rollout.tools` accepts by name (built-ins, plugins of the entry point group
    reasoning_rl.tools); any module:attr of a @tool function or Tool is accepted too."""
    from reasoning_rl.tools.listing import installed_tools

    infos = installed_tools()
    if as_json:
        typer.echo(json.dumps(infos, indent=2))
        return
    from rich.table import Table

    from graders.evaluation.streams import results_console

    table = Table(title="tools (entry point group reasoning_rl.tools)", title_justify="left")
    for col in ("name", "provider", "target", "description", "status"):
        table.add_column(col)
    for info in infos:
        table.add_row(info["name"], info["provider"], info["target"], info["description"], info["status"])
    results_console().print(table)
