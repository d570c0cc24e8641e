"""The ``rrl`` command. Heavy imports (torch, vLLM, Ray) happen inside commands so ``--help`` stays instant."""

from __future__ import annotations

import typer

from reasoning_rl import __version__

app = typer.Typer(
    name="rrl",
    help="reasoning-rl: train and evaluate reasoning LLMs with verifiable rewards.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"rrl {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True, help="Print the version."),
) -> None:
    """reasoning-rl command line."""


if __name__ == "__main__":
    app()
