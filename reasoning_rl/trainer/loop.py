"""The training loop: synchronous GRPO (or PPO with a critic), one step at a time.

sample prompts -> generate n each (grading streams as completions finish) -> mask grader errors ->
advantages -> reference/old log-probs -> update epochs over mini-batches -> weight hand-off -> log,
with eval and atomic checkpoints every k steps. Every stage is a span in ``trace.jsonl``.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from reasoning_rl.config import Config, save_config
from reasoning_rl.data import PromptSampler
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.checkpoint import CheckpointManager
from reasoning_rl.trainer.collect import Sample, collect
from reasoning_rl.trainer.eval import EvalResult, evaluate, write_rows
from reasoning_rl.trainer.governance import identity_fields
from reasoning_rl.trainer.metrics import MetricsLogger
from reasoning_rl.trainer.rewards import informative_groups, rewards_and_mask, sample_metrics
from reasoning_rl.trainer.setup import Components, build_components


class TrainError(RuntimeError):
    """A run cannot start or continue (bad run dir state, data/model problems); the message says why."""


@dataclass
class RunSummary:
    run_dir: Path
    steps: int
    resumed_from: int | None
    rewards: list[float] = field(default_factory=list)
    export_dir: Path | None = None
    last_eval: dict[str, float] = field(default_factory=dict)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Trainer:
    """Owns one run directory; ``run()`` trains to ``trainer.steps`` (resuming when asked)."""

    def __init__(self, cfg: Config, *, console: Console | None = None) -> None:
        self.cfg = cfg
        self.run_dir = cfg.run_dir
        self.console = console or Console()
        self.ckpt = CheckpointManager(self.run_dir / "checkpoints", keep=cfg.trainer.keep_checkpoints)

    # ------------------------------------------------------------------------------------------ setup
    def _resume_point(self) -> Any:
        stale = self.ckpt.clean_stale()
        if stale:
            self.console.print(f"removed {len(stale)} incomplete checkpoint dir(s) left by an interrupted save")
        info = self.ckpt.resolve(self.cfg.trainer.resume)
        if info is None and self.cfg.trainer.resume == "never" and self.ckpt.list() and not self.cfg.trainer.overwrite:
            raise TrainError(
                f"{self.run_dir} already has checkpoints; continue it with trainer.resume=auto, "
                "or start over with trainer.overwrite=true (or pick another run.name)"
            )
        return info

    def run(self) -> RunSummary:
        cfg = self.cfg
        info = self._resume_point()
        start_step = info.step if info is not None else 0
        seed_everything(cfg.run.seed)
        save_config(cfg, self.run_dir / "config.yaml")
        parts = build_components(cfg, self.run_dir, console=self.console)
        sampler = PromptSampler(len(parts.train_examples), cfg.run.seed, shuffle=cfg.data.shuffle)
        if info is not None:
            parts.load_checkpoint(info.path)
            sampler.load_state(CheckpointManager.load_trainer_state(info.path)["data"])
            CheckpointManager.load_rng(info.path)
            parts.push_weights(step=start_step, trace=None)
            self.console.print(f"resumed from {info.path} (step {start_step})")
        trace = StepTrace(self.run_dir / "trace.jsonl", meta=parts.trace_meta, append=info is not None)
        log = MetricsLogger(self.run_dir, cfg.logging, total_steps=cfg.trainer.steps, start_step=start_step,
                            run_name=cfg.run.name, config=cfg.model_dump(mode="json"), console=self.console)
        summary = RunSummary(self.run_dir, start_step, start_step if info is not None else None)
        status = "crashed"
        try:
            if cfg.eval.at_start and start_step == 0 and parts.val_examples:
                self._eval(parts, trace, log, 0, summary)
            for step in range(start_step + 1, cfg.trainer.steps + 1):
                metrics = self._step(parts, sampler, trace, step)
                log.log(step, metrics)
                summary.rewards.append(metrics["reward/mean"])
                summary.steps = step
                if cfg.eval.every and step % cfg.eval.every == 0 and parts.val_examples:
                    self._eval(parts, trace, log, step, summary)
                last = step == cfg.trainer.steps
                if last or (cfg.trainer.checkpoint_every and step % cfg.trainer.checkpoint_every == 0):
                    self._checkpoint(parts, sampler, trace, step, log)
            if parts.val_examples and not cfg.eval.every and cfg.trainer.steps > start_step:
                self._eval(parts, trace, log, cfg.trainer.steps, summary)
            if cfg.trainer.export:
                summary.export_dir = parts.policy_export(self.run_dir / "export")
                log.note(f"exported HF model to {summary.export_dir}")
            status = "ok"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            log.close()
            trace.close(status)
            parts.close()
        return summary

    # ------------------------------------------------------------------------------------------- step
    def _gather(self, parts: Components, sampler: PromptSampler, trace: StepTrace,
                step: int) -> list[Sample]:
        """Generate + grade a batch; with dynamic sampling, refill until enough groups carry signal."""
        cfg = self.cfg
        wanted = cfg.trainer.batch_size
        samples: list[Sample] = []
        rounds = 0
        while True:
            idx = sampler.next_batch(wanted if rounds == 0 else wanted - len({s.group for s in samples}))
            examples = [parts.train_examples[i] for i in idx]
            prompt_ids = [parts.train_prompt_ids[i] for i in idx]
            seed = cfg.run.seed * 1_000_003 + step * 10_007 + rounds * 101 * cfg.rollout.n
            new, timing = collect(parts.engine, parts.pool, examples, prompt_ids, parts.sampling(seed),
                                  grader_options=cfg.grading.options, trace=trace, step=step,
                                  group_offset=rounds * wanted)
            trace.counter("tokens_generated", step, timing.tokens_generated)
            self._trace_grade_latency(parts, trace, step)
            if not cfg.algorithm.dynamic_sampling:
                return new
            keep = informative_groups(new)
            samples.extend(s for s in new if s.group in keep)
            rounds += 1
            if len({s.group for s in samples}) >= wanted or rounds > cfg.algorithm.max_refill_rounds:
                if not samples:  # nothing informative at all: train on the last batch (advantages are 0)
                    samples = new
                return samples

    def _trace_grade_latency(self, parts: Components, trace: StepTrace, step: int) -> None:
        for name, stats in parts.pool.metrics().get("graders", {}).items():
            p50 = stats.get("latency_ms", {}).get("p50") if isinstance(stats.get("latency_ms"), dict) else None
            if p50 is not None:
                trace.counter("grade_latency_ms", step, p50, grader=name, stat="p50")

    def _step(self, parts: Components, sampler: PromptSampler, trace: StepTrace, step: int) -> dict[str, Any]:
        cfg = self.cfg
        t_step = time.time()
        samples = self._gather(parts, sampler, trace, step)
        if cfg.logging.samples:
            write_rows(self.run_dir / "samples" / f"step_{step}.jsonl", [
                {"id": s.example.uid, "group": s.group, "sample": s.completion.sample_index,
                 "data_source": s.example.data_source, "response": s.completion.text,
                 "finish_reason": s.completion.finish_reason, **identity_fields(s.example.grader),
                 **s.grade.to_dict()} for s in samples])
        rewards, mask = rewards_and_mask(samples, max_tokens=cfg.rollout.max_tokens, overlong=cfg.algorithm.overlong)
        metrics = sample_metrics(samples, rewards, mask)
        metrics["grading/masked"] = float((~mask).sum())
        update = parts.update(samples, rewards, mask, trace=trace, step=step)
        metrics.update(update)
        handoff = parts.push_weights(step=step, trace=trace)
        metrics.update(handoff)
        spans = trace.stage_seconds(step)
        metrics.update(spans)
        metrics["time/step_s"] = time.time() - t_step
        gen_s = spans.get("time/generate_s", 0.0)
        tokens = sum(len(s.completion.token_ids) for s in samples)
        metrics["throughput/gen_tokens_per_s"] = tokens / gen_s if gen_s > 0 else 0.0
        metrics["optim/lr"] = parts.lr()
        return metrics

    # ------------------------------------------------------------------------------ eval / checkpoint
    def _eval(self, parts: Components, trace: StepTrace, log: MetricsLogger, step: int,
              summary: RunSummary) -> EvalResult:
        cfg = self.cfg
        with trace.span("eval", step) as attrs:
            parts.engine_ready()
            result = evaluate(parts.engine, parts.pool, parts.val_examples, parts.val_prompt_ids, cfg.eval,
                              max_tokens=cfg.rollout.max_tokens, stop=cfg.rollout.stop,
                              grader_options=cfg.grading.options, seed=cfg.run.seed)
            attrs["prompts"] = len(result.rows)
        write_rows(self.run_dir / "eval" / f"step_{step}.jsonl", result.rows)
        log.log(step, result.metrics)
        summary.last_eval = result.metrics
        acc = result.metrics.get("eval/accuracy", float("nan"))
        log.note(f"eval @ step {step}: accuracy {acc:.3f} on {len(result.rows)} prompts")
        return result

    def _checkpoint(self, parts: Components, sampler: PromptSampler, trace: StepTrace, step: int,
                    log: MetricsLogger) -> None:
        with trace.span("checkpoint", step) as attrs:
            path = self.ckpt.save(step, parts.save_checkpoint, {
                "data": sampler.state(), "grader_cache": str(parts.cache_path) if parts.cache_path else None,
                "config": self.cfg.model_dump(mode="json"),
            })
            attrs["path"] = str(path)
        log.note(f"checkpoint saved: {path}")


class StepTrace(TraceWriter):
    """The run trace, also keeping per-step stage totals so the metrics line reports the same timings."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.totals: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        super().__init__(*args, **kwargs)

    def _write(self, record: dict[str, Any]) -> None:
        super()._write(record)
        if record.get("type") == "span":
            self.totals[int(record["step"])][str(record["stage"])] += float(record["end"]) - float(record["start"])

    def stage_seconds(self, step: int) -> dict[str, float]:
        return {f"time/{stage}_s": seconds for stage, seconds in self.totals.pop(step, {}).items()}
