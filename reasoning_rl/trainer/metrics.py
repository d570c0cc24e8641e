"""Per-step metrics to JSONL (the source of truth), TensorBoard, an optional W&B run, and the console.

On resume, JSONL lines and TensorBoard events past the checkpoint's step are dropped, so the curves
continue from the checkpoint exactly instead of showing the steps that were redone twice.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from reasoning_rl.config import ConfigError, LoggingConfig
from reasoning_rl.samples import COLUMNS, cells, markdown, pick
from reasoning_rl.trainer.resume import rotate

# What the live table shows (key, label, format); everything else goes to JSONL/TensorBoard only.
CONSOLE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("reward/mean", "reward", "{:.3f}"),
    ("reward/accuracy", "acc", "{:.3f}"),
    ("grading/error", "errors", "{:.0f}"),
    ("reward/frac_zero_std", "zero-std", "{:.2f}"),
    ("response/length_mean", "len", "{:.0f}"),
    ("policy/kl", "kl", "{:.4f}"),
    ("policy/entropy", "entropy", "{:.3f}"),
    ("time/step_s", "step s", "{:.1f}"),
    ("throughput/gen_tokens_per_s", "gen tok/s", "{:.0f}"),
)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a metrics JSONL (a torn last line from a crash is ignored)."""
    out: list[dict[str, Any]] = []
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _truncate_after(path: Path, step: int) -> None:
    kept = [r for r in read_metrics(path) if int(r.get("step", 0)) <= step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    tmp.replace(path)


def check_wandb(cfg: LoggingConfig) -> None:
    """``logging.wandb=true`` needs the wandb package: say so before a run loads anything."""
    if cfg.wandb and importlib.util.find_spec("wandb") is None:
        raise ConfigError(
            "logging.wandb=true but wandb is not installed: pip install wandb, or set logging.wandb=false"
        )


class MetricsLogger:
    """One run's metrics sinks. ``console="rich"`` shows a live table on a terminal and falls back to one plain
    line per step when the console is not one (a log file, nohup, SLURM): a live display would only be drawn
    when the run ends."""

    def __init__(
        self,
        run_dir: Path,
        cfg: LoggingConfig,
        *,
        total_steps: int,
        start_step: int = 0,
        run_name: str = "run",
        config: dict[str, Any] | None = None,
        console: Console | None = None,
    ) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.cfg = cfg
        self.console = console or Console(stderr=False)
        if start_step > 0 and self.path.exists():
            _truncate_after(self.path, start_step)
        elif start_step == 0 and (kept := rotate(self.path)) is not None:
            self.note(f"starting fresh: previous {self.path.name} kept as {kept.name}")
        self._fh = self.path.open("a", encoding="utf-8")
        self._tb: Any = None
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(
                str(run_dir / "tensorboard"), purge_step=start_step + 1 if start_step else None
            )
        self._wandb: Any = None
        if cfg.wandb:
            self._wandb = _wandb_run(run_dir, cfg, run_name, config, resuming=start_step > 0)
        self._rows: list[dict[str, Any]] = []
        self._now = ""  # the heartbeat's line: what the current step is doing (live display)
        self._live: Live | None = None
        self._progress: Progress | None = None
        self._task: Any = None
        self._plain = cfg.console == "plain" or (cfg.console == "rich" and not self.console.is_terminal)
        if cfg.console == "rich" and not self._plain:
            self._progress = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self._task = self._progress.add_task("train", total=total_steps, completed=start_step)
            self._live = Live(self._render(), console=self.console, refresh_per_second=2, transient=False)
            self._live.start()

    def _render(self) -> Group:
        table = Table(box=None, pad_edge=False, header_style="bold")
        table.add_column("step", justify="right")
        for _, label, _ in CONSOLE_COLUMNS:
            table.add_column(label, justify="right")
        for row in self._rows[-8:]:
            cells = [str(row["step"])]
            for key, _, fmt in CONSOLE_COLUMNS:
                v = row.get(key)
                cells.append(fmt.format(v) if isinstance(v, int | float) and math.isfinite(v) else "-")
            table.add_row(*cells)
        assert self._progress is not None
        return Group(table, self._progress, Text(self._now, style="dim"))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, **metrics}
        self._fh.write(json.dumps(record, default=float) + "\n")
        self._fh.flush()
        scalars = {
            k: float(v) for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)
        }
        if self._tb is not None:
            for k, v in scalars.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)
        if not k_is_eval(metrics):
            self._rows.append(record)
        if self._live is not None and self._progress is not None:
            if not k_is_eval(metrics):
                self._progress.update(self._task, completed=step)
            self._live.update(self._render())
        elif self._plain and not k_is_eval(metrics):
            shown = " ".join(
                f"{label}={row}"
                for key, label, fmt in CONSOLE_COLUMNS
                if (row := _fmt(metrics.get(key), fmt)) is not None
            )
            self.console.print(f"step {step}: {shown}", highlight=False, soft_wrap=True)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        """A few of the step's samples (``logging.log_completions``) as TensorBoard text and a W&B table."""
        picked = pick(rows, self.cfg.log_completions)
        if not picked:
            return
        if self._tb is not None:
            self._tb.add_text("samples", markdown(picked), step)
            self._tb.flush()
        if self._wandb is not None:
            import wandb

            table = wandb.Table(columns=list(COLUMNS), data=[cells(kind, row) for kind, row in picked])
            self._wandb.log({"samples": table}, step=step)

    def heartbeat(self, line: str, due: bool) -> None:
        """The heartbeat's sink: the live display shows every line; a log (plain) gets one when it is due."""
        if self._live is not None:
            self._now = line
            self._live.update(self._render())
        elif self._plain and due:
            self.console.print(f"heartbeat: {line}", highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        """A one-line message above the live table (checkpoint saved, eval done, ...)."""
        if self.cfg.console != "none":
            self.console.print(text, highlight=False, soft_wrap=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        if not self._fh.closed:
            self._fh.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


WANDB_ID_FILE = "wandb_run_id"


def _wandb_run(
    run_dir: Path, cfg: LoggingConfig, run_name: str, config: dict[str, Any] | None, *, resuming: bool
) -> Any:
    """A W&B run; a resumed training run continues the W&B run it started (its id is kept in the run dir)."""
    import wandb

    id_file = run_dir / WANDB_ID_FILE
    run_id = id_file.read_text(encoding="utf-8").strip() if resuming and id_file.is_file() else None
    run = wandb.init(project=cfg.wandb_project, name=run_name, config=config, id=run_id, resume="allow")
    id_file.write_text(str(run.id), encoding="utf-8")
    return run


def k_is_eval(metrics: dict[str, Any]) -> bool:
    return any(k.startswith("eval/") for k in metrics) and not any(k.startswith("reward/") for k in metrics)


def _fmt(value: Any, fmt: str) -> str | None:
    if isinstance(value, int | float) and math.isfinite(value):
        return fmt.format(value)
    return None
