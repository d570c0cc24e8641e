"""``rrl sandbox build|check``: build the sandbox image (offline by default) and report whether a backend works."""

from __future__ import annotations

import logging

import typer

app = typer.Typer(help="Build and check the code sandbox.", no_args_is_help=True)


@app.command()
def build(
    image: str = typer.Option(None, help="Image tag (default: the tag the Docker backend uses)."),
    dockerfile: bool = typer.Option(
        False, "--dockerfile", help="Build from the Dockerfile (needs a registry)."
    ),
    mirror: str = typer.Option(None, help="Debian mirror for the offline build (default: deb.debian.org)."),
    force: bool = typer.Option(False, help="Rebuild even if the tag exists."),
    sci: bool = typer.Option(
        False, "--sci", help="Build the scientific image (sympy, numpy, mpmath) the python tool uses."
    ),
    lean: bool = typer.Option(
        False,
        "--lean",
        help="Build the optional Lean 4 + Mathlib image instead (elan; needs internet access).",
    ),
) -> None:
    """Build the sandbox image: debootstrap -> docker import (offline), or the Dockerfile."""
    from sandboxes.image import (
        DEFAULT_IMAGE,
        LEAN_DOCKERFILE_DIR,
        LEAN_IMAGE,
        SCI_IMAGE,
        build_dockerfile,
        build_offline,
    )

    logging.basicConfig(level=logging.INFO, format="[sandbox] %(message)s")
    name = image or (LEAN_IMAGE if lean else SCI_IMAGE if sci else DEFAULT_IMAGE)
    try:
        if lean:
            message = build_dockerfile(name, LEAN_DOCKERFILE_DIR)
        else:
            message = (
                build_dockerfile(name) if dockerfile else build_offline(name, mirror=mirror, force=force)
            )
    except Exception as exc:  # noqa: BLE001 - report any build failure as one clear line, no traceback
        typer.echo(f"[sandbox] build failed: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"[sandbox] {message}")


@app.command()
def check(
    backend: str = typer.Option("auto", help="auto | docker | local"),
    image: str = typer.Option(None, help="Image to check (docker backend)."),
) -> None:
    """Run a tiny program in the sandbox and say whether it works, and why not."""
    import sandboxes

    options = {"image": image} if image and backend != "local" else {}
    ok, message = sandboxes.check(backend, **options)
    typer.echo(f"[sandbox] {'OK' if ok else 'FAILED'}: {message}")
    if not ok:
        raise typer.Exit(1)
