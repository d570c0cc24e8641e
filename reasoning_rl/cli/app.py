"""The ``rrl`` typer app: every command's arguments and options; the bodies are the ``reasoning_rl.cli`` modules
and the packages they call. Heavy imports (torch, vLLM, Ray) happen inside commands so ``--help`` stays
instant."""

from __future__ import annotations

from pathlib import Path

import typer

from reasoning_rl import __version__

app = typer.Typer(
    name="rrl",
    help="reasoning-rl: train and evaluate reasoning LLMs with verifiable rewards.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Plain help text: rich markup would eat every documented "[default: ...]" as a style tag.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


# Sub-apps: their modules import only typer at load time, so ``rrl --help`` stays fast.
from sandboxes.cli import app as _sandbox_app  # noqa: E402

_sandbox_app.rich_markup_mode = None  # as for the root app: keep "(default: ...)" in help texts
app.add_typer(_sandbox_app, name="sandbox")

from graders.cli import grade_command, graders_app  # noqa: E402

app.command("grade")(grade_command)
graders_app.rich_markup_mode = None
app.add_typer(graders_app, name="graders")

from reasoning_rl.tools.cli import tools_app  # noqa: E402

tools_app.rich_markup_mode = None
app.add_typer(tools_app, name="tools")


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"rrl {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """reasoning-rl command line."""


@app.command()
def doctor(
    config: str = typer.Argument(None, help="Config YAML: decides which checks are required."),
    overrides: list[str] = typer.Argument(None, help="key.path=value overrides, as for `rrl train`."),
) -> None:
    """Check this machine (packages, CUDA, vLLM, Ray, Docker, Lean, disk); exit 1 if CONFIG needs what is missing."""
    from reasoning_rl.doctor import ConfigError, blocking, render, run_checks

    try:
        results = run_checks(config, overrides)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    render(results)
    stops = blocking(results)
    if stops:
        typer.echo(f"{len(stops)} required check(s) failed: " + ", ".join(r.name for r in stops), err=True)
        raise typer.Exit(1)


@app.command()
def report(
    run_dir: str = typer.Argument(
        ..., help="A run directory written by `rrl train` (running, finished or crashed)."
    ),
    out: str = typer.Option(
        None, "-o", "--out", help="HTML file to write [default: RUN_DIR/report/report.html]."
    ),
    peak_tflops: float = typer.Option(
        None, help="Peak dense TFLOP/s per device for MFU, if not in the table."
    ),
) -> None:
    """Write a self-contained HTML report (and PNGs) of where a run's time, bytes and rewards went."""
    from reasoning_rl.report import ReportError, write_report

    try:
        result = write_report(run_dir, out, peak_tflops=peak_tflops)
    except ReportError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    from reasoning_rl.report.freshness import gate_summary

    if (gate := gate_summary(result.analysis.metrics)) is not None:
        typer.echo(gate)
    typer.echo(f"report: {result.html}")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def train(
    ctx: typer.Context,
    config: str = typer.Argument(..., help="Config YAML; then any number of key.path=value overrides."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Resume even though trajectory-defining keys or the data "
        "changed since the checkpoint (trainer.force_resume=true).",
    ),
    verbose: bool = typer.Option(
        False, "--verbose", help="Show the rollout engine's own log lines (logging.engine_logs=true)."
    ),
    print_config: bool = typer.Option(
        False,
        "--print-config",
        help="Print the resolved config (file + overrides + defaults) as YAML and exit.",
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Check the config, model path and tokenizer, every data "
        "row, the graders and their options, the tool set, the resource request and the doctor's "
        "required checks; no training.",
    ),
    plan_for: str = typer.Option(
        None,
        "--plan-for",
        metavar="TARGET",
        help="With --dry-run: check the resources and print the memory plan and the largest micro-batch for "
        "TARGET's GPUs instead of this machine's (h200, h200x2, h200x4, h200x8, h100..., a100-80g...), e.g. "
        "from a CPU login node.",
    ),
) -> None:
    """Train with RL on verifiable rewards (GRPO by default); writes the run directory.

    Overrides: key.path=value (YAML values). A mapping value merges into the
    file's mapping key by key, at every depth: grading.options={math: {mode:
    strict}} sets math.mode and keeps every other key of grading.options; any
    other value (a list too: data.train=[...]) replaces the file's. To drop a
    mapping's key, edit the file. Check the result with --print-config.

    Checkpoint size: weights + Adam's two moments, 3 x the bytes of
    model.dtype per trainable parameter (float32, the CPU default: 12 B;
    bfloat16, the CUDA default: 6 B), the critic's too with GAE; measured
    1.7 GB for SmolLM2-135M in float32. trainer.keep_checkpoints (default 2)
    of them stay on disk.
    """
    from reasoning_rl.cli.train import train_command

    extra = ["trainer.force_resume=true"] * force + ["logging.engine_logs=true"] * verbose
    overrides = [*ctx.args, *extra]
    raise typer.Exit(
        train_command(config, overrides, print_config=print_config, dry_run=dry_run, plan_for=plan_for)
    )


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def sft(
    ctx: typer.Context,
    config: str = typer.Argument(..., help="Config YAML; then any number of key.path=value overrides."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Resume even though the config or the rows changed (trainer.force_resume=true).",
    ),
    print_config: bool = typer.Option(
        False, "--print-config", help="Print the resolved config as YAML and exit."
    ),
) -> None:
    """Supervised fine-tuning (a warm start before `rrl train`): loss on the assistant's tokens of data.train's
    chat or prompt/response rows; eval loss and token accuracy on data.val (or sft.val_fraction held out).

    Same config, model workers, checkpoints and exports as `rrl train` (docs/sft.md): `rrl export RUN_DIR`
    exports it, `rrl train RL.yaml model.path=RUN_DIR` starts RL from it.
    """
    from reasoning_rl.cli.sft import sft_command

    extra = ["trainer.force_resume=true"] * force
    raise typer.Exit(sft_command(config, [*ctx.args, *extra], print_config=print_config))


@app.command("eval", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def eval_(
    ctx: typer.Context,
    config: str = typer.Argument(
        None, help="Config YAML (evaluates data.val, else data.train); then overrides."
    ),
    model: str = typer.Option(
        None,
        "--model",
        help="Model dir (instead of, or overriding, the config's), a PEFT adapter dir (merged into its base "
        "once, under .cache/merged/), or a run dir: its checkpoint --step, exported to RUN_DIR/export/step_N.",
    ),
    step: int = typer.Option(
        None, "--step", help="With --model RUN_DIR: the checkpoint step [default: latest complete]."
    ),
    data: str = typer.Option(None, "--data", help="Dataset file/dir/hub name (instead of the config's)."),
    n: int = typer.Option(
        None, "--n", help="Samples per prompt (pass@n, maj@n); n > 1 needs eval.temperature > 0."
    ),
    out: str = typer.Option(
        None, "-o", "--out", help="Per-prompt results JSONL [default: RUN_DIR/eval/results.jsonl]."
    ),
    verbose: bool = typer.Option(
        False, "--verbose", help="Show the rollout engine's own log lines (logging.engine_logs=true)."
    ),
) -> None:
    """Generate with vLLM and grade: accuracy, pass@k and maj@k per data source (no training)."""
    from reasoning_rl.cli.eval import eval_command

    extra = ["logging.engine_logs=true"] * verbose
    raise typer.Exit(
        eval_command(config, [*ctx.args, *extra], model=model, data=data, n=n, out=out, step=step)
    )


@app.command()
def export(
    run_dir: str = typer.Argument(..., help="A run directory written by `rrl train`."),
    step: int = typer.Option(None, "--step", help="Checkpoint step [default: latest complete]."),
    out: str = typer.Option(None, "-o", "--out", help="Output dir [default: RUN_DIR/export/step_N]."),
    push_to_hub: str = typer.Option(
        None,
        "--push-to-hub",
        metavar="REPO",
        help="Then upload the export to this Hugging Face Hub repo (NAME or OWNER/NAME; created if missing). "
        "Token: HF_TOKEN or `hf auth login`; HF_ENDPOINT for another hub.",
    ),
    private: bool = typer.Option(False, "--private", help="With --push-to-hub: create the repo private."),
    adapter: bool = typer.Option(
        False,
        "--adapter",
        help="LoRA runs: write a PEFT adapter directory (peft.PeftModel.from_pretrained loads it) instead of "
        "the adapters merged into the base model.",
    ),
) -> None:
    """Export a checkpoint as a plain HF model directory (safetensors + tokenizer), optionally pushed to the Hub.
    A LoRA run's checkpoint: merged into its base model, or with --adapter a PEFT adapter directory."""
    from reasoning_rl.trainer.hub import HubPushError, HubTarget

    try:  # before the export (and torch's import): a push that cannot happen is refused at once
        if private and push_to_hub is None:
            raise HubPushError("--private applies to the repo --push-to-hub creates; give --push-to-hub REPO")
        target = HubTarget.resolve(push_to_hub, private=private) if push_to_hub is not None else None
    except HubPushError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    from reasoning_rl.cli.common import quiet_outside_a_terminal

    quiet_outside_a_terminal()  # before torch, transformers and vLLM are imported
    from reasoning_rl.policy.model import ModelLoadError
    from reasoning_rl.trainer.export import export_checkpoint

    try:
        path = export_checkpoint(run_dir, step=step, out=out, form="adapter" if adapter else "merged")
        typer.echo(f"exported: {path}")
        if target is not None:
            url = target.push(path, f"rrl export {Path(run_dir).resolve().name} ({path.name})")
            typer.echo(f"pushed: {url}")
    except (FileNotFoundError, ModelLoadError, HubPushError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
