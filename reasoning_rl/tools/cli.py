"""``rrl tools list``. Only typer is imported here; the listing is imported when the command runs."""

from __future__ import annotations

import typer

tools_app = typer.Typer(help="Tools for multi-turn rollouts (rollout.tools).", no_args_is_help=True)


@tools_app.command("list")
def list_command(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show every tool `rollout.tools` accepts by name (built-ins, plugins of the entry point group
    reasoning_rl.tools); any module:attr of a @tool function or Tool is accepted too."""
    from graders.evaluation.streams import print_listing
    from reasoning_rl.tools.listing import installed_tools

    columns = ("name", "provider", "target", "description", "status")
    print_listing(installed_tools(), "tools (entry point group reasoning_rl.tools)", columns, as_json)
