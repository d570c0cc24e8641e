"""``rrl sft``: supervised fine-tuning on the run machinery of ``rrl train``.

The same model workers (one in-process rank, or Ray ranks under FSDP2 per ``resources``; built without a rollout
engine), the same policy (LoRA or full, packing, token budgets, activation checkpointing and offload), the same
atomic sharded checkpoints (so ``rrl export``, ``rrl eval --model RUN_DIR`` and ``rrl train model.path=RUN_DIR``
read an SFT run as they read an RL one), the same metrics sinks (JSONL, TensorBoard, W&B) and resume checks.
What is SFT's own: the rows (``data.sft``), their order (``sft_data``) and the loss (``policy.sft``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from reasoning_rl.checkpoint import CheckpointInfo, CheckpointManager
from reasoning_rl.config import Config, save_config
from reasoning_rl.distributed.group import WorkerGroup
from reasoning_rl.distributed.rank import RankArgs
from reasoning_rl.distributed.worker import ModelWorker, WorkerSpec
from reasoning_rl.factory import resolve_device, resolve_model_dir, run_dtype
from reasoning_rl.faults import fault_point
from reasoning_rl.trainer.loop import seed_everything
from reasoning_rl.trainer.metrics import MetricsLogger, check_wandb
from reasoning_rl.trainer.resume import TrainError, check_config
from reasoning_rl.trainer.sft_data import SftData, load_sft_data, loss_tokens, token_batch


@dataclass
class SftSummary:
    run_dir: Path
    steps: int
    resumed_from: int | None
    last_eval: dict[str, float] = field(default_factory=dict)
    export_dir: Path | None = None


def worker_config(cfg: Config, total_steps: int) -> Config:
    """The config the model workers build from: the policy alone (no reference, no critic), the ``sft``
    section's micro-batching, and a cosine schedule (``optim.schedule``) over the SFT run's optimizer steps."""
    algo = cfg.algorithm.model_copy(
        update={
            "name": "grpo",
            "kl_coef": 0.0,
            "packing": cfg.sft.packing,
            "micro_batch_tokens": cfg.sft.micro_batch_tokens,
        }
    )
    trainer = cfg.trainer.model_copy(update={"steps": total_steps})
    return cfg.model_copy(update={"algorithm": algo, "trainer": trainer})


def _eval_due(cfg: Config, data: SftData, step: int) -> bool:
    every = cfg.sft.eval_every or data.steps_per_epoch
    return bool(data.val) and (step % every == 0 or step == data.total_steps)


class SftTrainer:
    """Owns one run directory; ``run()`` trains to the end of ``sft.epochs`` (or ``sft.max_steps``)."""

    def __init__(self, cfg: Config, *, console: Console | None = None) -> None:
        self.cfg = cfg
        self.run_dir = cfg.run_dir
        self.console = console or Console()
        self.ckpt = CheckpointManager(self.run_dir / "checkpoints", keep=cfg.trainer.keep_checkpoints)
        self.completed_step = 0

    def _resume_point(self) -> CheckpointInfo | None:
        if self.ckpt.clean_stale():
            self.console.print("removed incomplete checkpoint dir(s) left by an interrupted save")
        info = self.ckpt.resolve(self.cfg.trainer.resume)
        fresh = info is None and self.cfg.trainer.resume == "never"
        if fresh and self.ckpt.list() and not self.cfg.trainer.overwrite:
            raise TrainError(
                f"{self.run_dir} already has checkpoints; continue it with trainer.resume=auto, "
                "or start over with trainer.overwrite=true (or pick another run.name)"
            )
        return info

    def run(self) -> SftSummary:
        from reasoning_rl.distributed.launch import start_group
        from reasoning_rl.policy.model import load_tokenizer

        cfg = self.cfg
        check_wandb(cfg.logging)
        info = self._resume_point()
        state = CheckpointManager.load_trainer_state(info.path) if info is not None else None
        if info is not None and state is not None:
            for change in check_config(state.get("config"), cfg, info.path):
                self.console.print(f"[yellow]warning:[/yellow] resuming with --force although {change}")
        start = info.step if info is not None else 0
        self.completed_step = start
        seed_everything(cfg.run.seed)
        device = resolve_device(cfg.run.device)
        model_dir = resolve_model_dir(cfg)
        tokenizer = load_tokenizer(str(model_dir), require_chat_template=cfg.data.chat_template is True)
        data = load_sft_data(cfg, tokenizer, self.console)
        changed = state is not None and state.get("data_fingerprint") != data.fingerprint()
        if info is not None and changed and not cfg.trainer.force_resume:
            raise TrainError(
                f"cannot resume {info.path}: the SFT training rows changed since that checkpoint; restore "
                "the data, start a new run (another run.name), or continue anyway with --force"
            )
        dtype = run_dtype(cfg, device)
        longest = max(len(ex.ids) for ex in data.train + data.val)
        spec = WorkerSpec(
            worker_config(cfg, data.total_steps), model_dir, device, dtype, longest, engine=False
        )
        self.console.print(
            f"sft: {model_dir} on {device} ({dtype}), {data.total_steps} steps of {data.batch_size} rows "
            f"({cfg.sft.epochs} epoch(s) x {data.steps_per_epoch})"
        )
        group = start_group(spec, console=self.console)
        pad = getattr(tokenizer, "pad_token_id", None)
        pad_id = int(pad if pad is not None else 0)
        log: MetricsLogger | None = None
        try:
            if info is not None:
                group.call_all(ModelWorker.load_checkpoint, info.path)
                CheckpointManager.load_rng(info.path)
                self.console.print(f"resumed from {info.path} (step {start})")
            save_config(cfg, self.run_dir / "config.yaml")
            quiet = cfg.logging.model_copy(update={"console": "none"})  # SFT prints its own line per step
            log = MetricsLogger(
                self.run_dir,
                quiet,
                total_steps=data.total_steps,
                start_step=start,
                run_name=cfg.run.name,
                config=cfg.model_dump(mode="json"),
                console=self.console,
            )
            last_eval: dict[str, float] = {}
            if start == 0 and data.val:
                last_eval = self.evaluate(group, data, pad_id)
                log.log(0, last_eval)
                self._say(0, data, last_eval)
            for step in range(start + 1, data.total_steps + 1):
                metrics = self._train_step(group, data, step, pad_id)
                if _eval_due(cfg, data, step):
                    last_eval = self.evaluate(group, data, pad_id)
                    metrics.update(last_eval)
                log.log(step, metrics)
                self._say(step, data, metrics)
                every = cfg.trainer.checkpoint_every
                if (every and step % every == 0) or step == data.total_steps:
                    self._save(group, data, step)
                self.completed_step = step
            export = None
            if cfg.trainer.export and data.total_steps > 0:
                export = self.run_dir / "export" / f"step_{data.total_steps}"
                group.call_all(ModelWorker.export, export)
                self.console.print(f"exported HF model to {export}")
            return SftSummary(self.run_dir, data.total_steps, start or None, last_eval, export)
        finally:
            if log is not None:
                log.close()
            group.close()

    def _train_step(self, group: WorkerGroup, data: SftData, step: int, pad_id: int) -> dict[str, Any]:
        rows = data.step_rows(step - 1)
        norm = float(loss_tokens(rows))
        begin = time.perf_counter()
        out = group.call(
            ModelWorker.sft_train_step,
            [RankArgs(token_batch([rows[i] for i in s], pad_id), norm) for s in group.shards(len(rows))],
        )[0]
        fault_point("update")  # a crash test's SIGKILL after an optimizer step
        seconds = time.perf_counter() - begin
        return {
            "train/loss": out["loss"],
            "train/grad_norm": out["grad_norm"],
            "train/lr": out["lr"],
            "train/loss_tokens": out["tokens"],
            "train/epoch": step / data.steps_per_epoch,
            "train/padding_share": out["padding_share"],
            "time/step_s": seconds,
            "throughput/tokens_per_s": sum(len(ex.ids) for ex in rows) / max(seconds, 1e-9),
        }

    def evaluate(self, group: WorkerGroup, data: SftData, pad_id: int) -> dict[str, float]:
        """Eval loss (mean NLL per assistant token) and greedy token accuracy on the eval split."""
        rows = data.val
        sums = group.call(
            ModelWorker.sft_eval,
            [RankArgs(token_batch([rows[i] for i in s], pad_id)) for s in group.shards(len(rows))],
        )[0]
        return {
            "eval/loss": sums["nll"] / sums["tokens"],
            "eval/token_accuracy": sums["correct"] / sums["tokens"],
        }

    def _save(self, group: WorkerGroup, data: SftData, step: int) -> None:
        def write(tmp: Path) -> None:
            group.call_all(ModelWorker.save_checkpoint, tmp)

        self.ckpt.save(
            step,
            write,
            {
                "kind": "sft",
                "config": self.cfg.model_dump(mode="json"),
                "data_fingerprint": data.fingerprint(),
            },
        )

    def _say(self, step: int, data: SftData, m: dict[str, Any]) -> None:
        if self.cfg.logging.console == "none":
            return
        parts = [f"step {step}/{data.total_steps}"]
        for key, label, fmt in (
            ("train/loss", "loss", "{:.4f}"),
            ("train/lr", "lr", "{:.2e}"),
            ("throughput/tokens_per_s", "tok/s", "{:.0f}"),
            ("eval/loss", "eval_loss", "{:.4f}"),
            ("eval/token_accuracy", "eval_acc", "{:.3f}"),
        ):
            if key in m:
                parts.append(f"{label}={fmt.format(m[key])}")
        self.console.print(" ".join(parts), highlight=False, soft_wrap=True)
