"""The training loop: synchronous GRPO (or PPO with a critic), one step at a time.

``Trainer._step`` is the algorithm, one line per stage, each one hop from its implementation: generate +
grade (the ``Frontier``: typed ``Rollouts``) -> ``make_train_batch`` (rewards, loss mask, old/ref log-probs,
advantages: a typed ``TrainBatch``) -> ``update`` (epochs over mini-batches) -> weight hand-off -> log,
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
from rich.markup import escape

from reasoning_rl.checkpoint import CheckpointManager
from reasoning_rl.config import Config, save_config
from reasoning_rl.data import PromptSampler
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.build import Components, build_components
from reasoning_rl.trainer.collect import RewardPlan
from reasoning_rl.trainer.eval import EvalResult, evaluate, prompt_messages, write_rows
from reasoning_rl.trainer.frontier import Frontier, generated_tokens
from reasoning_rl.trainer.governance import identity_fields
from reasoning_rl.trainer.grading_health import check_grading, trace_grade_latency
from reasoning_rl.trainer.heartbeat import Heartbeat
from reasoning_rl.trainer.interrupt import interrupts_held
from reasoning_rl.trainer.last_step import FinishedStep, UpdateGuard, checkpoint_due
from reasoning_rl.trainer.metrics import MetricsLogger, check_wandb
from reasoning_rl.trainer.producers import ToolTurns
from reasoning_rl.trainer.records import Rollouts
from reasoning_rl.trainer.rejection import RejectAndAdmit
from reasoning_rl.trainer.resume import (
    TrainError,
    check_config,
    check_data,
    check_frontier,
    data_fingerprint,
    rotate,
)
from reasoning_rl.trainer.rewards import rewards_and_mask, sample_metrics, verdict_grader
from reasoning_rl.trainer.speculation import draft_metrics, trace_drafts
from reasoning_rl.trainer.tool_collect import tool_metrics, turn_fields
from reasoning_rl.trainer.train_batch import make_train_batch
from reasoning_rl.trainer.update import update


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
        self._sample_rows: list[dict[str, Any]] = []  # the last step's samples (samples/, TensorBoard, W&B)
        self.rewards = RewardPlan(cfg.grading)  # each row's reward components (grading.rewards)
        self.completed_step = 0  # the last step that finished (what an interrupted run reports)
        self.frontier: Frontier | None = None  # the one rollout loop (built by run, over the run's engine)
        self.guard = UpdateGuard()  # Ctrl-C waits from a step's update to its end
        self.finished: FinishedStep | None = None  # what Ctrl-C saves (last_step.py)
        self._saving = False  # a checkpoint is being written (a second Ctrl-C there means: stop now)

    # ------------------------------------------------------------------------------------------ setup
    def _resume_point(self) -> Any:
        stale = self.ckpt.clean_stale()
        if stale:
            self.console.print(
                f"removed {len(stale)} incomplete checkpoint dir(s) left by an interrupted save"
            )
        info = self.ckpt.resolve(self.cfg.trainer.resume)
        if (
            info is None
            and self.cfg.trainer.resume == "never"
            and self.ckpt.list()
            and not self.cfg.trainer.overwrite
        ):
            raise TrainError(
                f"{self.run_dir} already has checkpoints; continue it with trainer.resume=auto, "
                "or start over with trainer.overwrite=true (or pick another run.name)"
            )
        if info is None and self.cfg.trainer.resume == "auto":
            self.console.print(
                f"trainer.resume=auto: no complete checkpoint in {self.ckpt.root}, starting fresh"
            )
        return info

    def _note_forced(self, changes: list[str]) -> None:
        for change in changes:
            self.console.print(
                f"[yellow]warning:[/yellow] resuming with --force although {change}", highlight=False
            )

    def run(self) -> RunSummary:
        cfg = self.cfg
        check_wandb(cfg.logging)  # before anything slow: a missing package must not cost a model load
        info = self._resume_point()
        state = CheckpointManager.load_trainer_state(info.path) if info is not None else None
        if info is not None and state is not None:
            self._note_forced(check_config(state.get("config"), cfg, info.path))
            check_frontier(state.get("config"), state.get("frontier"), cfg, info.path)
        else:
            kept = rotate(self.run_dir / "trace.jsonl")
            if kept is not None:
                self.console.print(f"previous trace.jsonl kept as {kept.name}")
        start_step = info.step if info is not None else 0
        self.completed_step = start_step
        seed_everything(cfg.run.seed)
        parts = build_components(cfg, self.run_dir, console=self.console)
        sampler = PromptSampler(len(parts.train_prompts), cfg.run.seed, shuffle=cfg.data.shuffle)
        if info is not None and state is not None:
            train_examples = [p.example for p in parts.train_prompts]
            self._note_forced(check_data(state.get("data_fingerprint"), train_examples, cfg, info.path))
            try:
                sampler.load_state(state["data"])
            except ValueError as exc:
                raise TrainError(f"cannot resume {info.path}: {exc}") from None
            parts.load_checkpoint(info.path)
            CheckpointManager.load_rng(info.path)
            parts.push_weights(version=start_step, trace=None)  # the checkpoint's start_step updates
            self.console.print(f"resumed from {info.path} (step {start_step})")
        self.frontier = self._frontier(parts, sampler)
        if self.frontier is not None and info is not None and state is not None and state.get("frontier"):
            try:
                self.frontier.load_state(state["frontier"])  # finished-untrained + partial samples
            except ValueError as exc:
                raise TrainError(f"cannot resume {info.path}: {exc}") from None
        # only now: until the resume checks pass, config.yaml keeps describing the run's checkpoints
        save_config(cfg, self.run_dir / "config.yaml")
        trace = StepTrace(self.run_dir / "trace.jsonl", meta=parts.trace_meta, append=info is not None)
        log = MetricsLogger(
            self.run_dir,
            cfg.logging,
            total_steps=cfg.trainer.steps,
            start_step=start_step,
            run_name=cfg.run.name,
            config=cfg.model_dump(mode="json"),
            console=self.console,
        )
        summary = RunSummary(self.run_dir, start_step, start_step if info is not None else None)
        beat = Heartbeat(cfg.logging.heartbeat_s or 0.0, log.heartbeat)
        if cfg.logging.heartbeat_s is not None:
            trace.on_progress = beat.report  # the stages report through the trace they already write
            beat.start()
        status = "crashed"
        saved_at = time.monotonic()
        try:
            if cfg.eval.at_start and start_step == 0 and parts.val_prompts:
                self._eval(parts, trace, log, 0, summary)
            for step in range(start_step + 1, cfg.trainer.steps + 1):
                beat.begin(step)
                metrics = self._step(parts, sampler, trace, step)
                log.log(step, metrics)
                log.log_samples(step, self._sample_rows)
                summary.rewards.append(metrics["reward/mean"])
                summary.steps = self.completed_step = step
                self.finished = FinishedStep.now(step, sampler, self.frontier)
                self.guard.release()  # a Ctrl-C held since the update stops the run here, saving this step
                last = step == cfg.trainer.steps
                # every eval.every steps, and always at the last step (as verl and TRL do)
                if parts.val_prompts and (last or (cfg.eval.every and step % cfg.eval.every == 0)):
                    self._eval(parts, trace, log, step, summary)
                if checkpoint_due(cfg.trainer, step, (time.monotonic() - saved_at) / 60):
                    self._checkpoint(parts, self.finished, trace, log)
                    saved_at = time.monotonic()
                parts.trace_ranks(
                    trace, step
                )  # several ranks: driver <-> worker bytes, per-rank time, memory
            if cfg.trainer.export:
                summary.export_dir = parts.policy_export(self.run_dir / "export" / f"step_{summary.steps}")
                log.note(f"exported HF model to {summary.export_dir}")
            status = "ok"
        except KeyboardInterrupt:
            status = "interrupted"
            self._save_on_interrupt(parts, trace, log)
            raise
        finally:
            if self.frontier is not None:
                self.frontier.close()
            self.guard.abandon()
            beat.close()
            log.close()
            trace.close(status)
            parts.close()
        return summary

    # ------------------------------------------------------------------------------------------- step
    def _step(self, parts: Components, sampler: PromptSampler, trace: StepTrace, step: int) -> dict[str, Any]:
        """One GRPO/PPO step, one stage per line."""
        t_step = time.time()
        rollouts, flow = self._gather(parts, trace, step)  # n per prompt, graded as each finishes
        self._write_samples(step, rollouts)
        drafts = draft_metrics([s.completion for s in rollouts.samples])  # rollout.speculative
        trace_drafts(trace, step, drafts)
        self._check_grading(rollouts, step)  # no judged sample: stop; many errors: warn
        if self.frontier is not None:
            self.frontier.park()  # an engine about to sleep cannot keep unfinished requests: stop them
        parts.engine_sleep()  # the trainer's passes get the engine's memory
        batch, batch_metrics = make_train_batch(rollouts, parts.models, parts.plan, trace=trace, step=step)
        self.guard.enter(step)  # from here the models change: Ctrl-C waits for the step's end
        trained = update(parts.models, batch, parts.plan, trace=trace, step=step)  # policy (+ critic) steps
        handoff = parts.push_weights(version=step, trace=trace)  # step's update made version step
        return {
            **self._rollout_metrics(rollouts),
            **flow,
            **tool_metrics(rollouts),
            **drafts,
            **batch_metrics,
            **trained,
            **handoff,
            **self._timings(trace, step, t_step, flow),
            "optim/lr": parts.lr(),
        }

    def _frontier(self, parts: Components, sampler: PromptSampler) -> Frontier:
        """The one rollout loop: the in-flight rollouts of the run's engine (``Components.rollout_engine``).
        Every step goes through it, ``rollout.max_lag = 0`` being the synchronous step; tool runs fill each
        sample with the tool loop (``trainer/producers``); dynamic sampling rejects groups without reward spread
        and admits others (``trainer/rejection``)."""
        cfg = self.cfg
        engine = parts.rollout_engine()
        resident = cfg.rollout.sleep is False or not getattr(engine, "sleep_enabled", False)
        frontier = Frontier(
            engine,
            parts.pool,
            parts.train_prompts,
            self.rewards,
            sampler,
            batch=cfg.trainer.batch_size,
            max_lag=cfg.rollout.max_lag,
            running_groups=cfg.rollout.running_groups,
            sampling=parts.sampling,
            seed_for_step=lambda step: self._seed(step, 0),
            tokenizer=parts.tokenizer,
            resident=resident,
            rejection=(
                RejectAndAdmit(cfg.trainer.batch_size, cfg.algorithm.max_refill_rounds)
                if cfg.algorithm.dynamic_sampling
                else None
            ),
            tools=ToolTurns(parts.tools, parts.sampling(0)) if parts.tools is not None else None,
        )
        if cfg.rollout.max_lag > 0:
            where = "the engine in this process" if parts.group.world == 1 else "each colocated rank's engine"
            if cfg.resources.placement == "split":
                mode = (
                    "during the update"
                    if cfg.rollout.overlap
                    else "only when stepped (rollout.overlap=false)"
                )
                where = f"{parts.group.engine_count} rollout rank(s) of their own, decoding {mode}"
            self.console.print(
                f"continuous rollouts on {where}: max_lag={cfg.rollout.max_lag}, "
                f"{frontier.schedule.slots} groups generating, up to {frontier.schedule.capacity} untrained; "
                "unfinished requests across an update: "
                + (
                    "kept resident"
                    if resident
                    else "stopped and resubmitted from their partial tokens (engine sleeps)"
                )
            )
        return frontier

    def _seed(self, step: int, rounds: int) -> int:
        """The base seed of a step's (refill round's) requests: sample j of each prompt uses it + j."""
        return self.cfg.run.seed * 1_000_003 + step * 10_007 + rounds * 101 * self.cfg.rollout.n

    def _gather(self, parts: Components, trace: StepTrace, step: int) -> tuple[Rollouts, dict[str, float]]:
        """Generate + grade a batch: the frontier's oldest B finished groups (and its metrics)."""
        assert self.frontier is not None, "run() builds the frontier before the first step"
        rollouts, flow = self.frontier.next_batch(step, trace)
        trace.counter("tokens_generated", step, generated_tokens(flow))
        trace_grade_latency(parts.pool.metrics(), trace, step)
        return rollouts, flow

    def _write_samples(self, step: int, rollouts: Rollouts) -> None:
        """The step's samples as rows: kept for TensorBoard / W&B (``log_samples``), written to samples/."""
        self._sample_rows = [
            {
                "id": s.example.uid,
                "group": s.group,
                "sample": s.completion.sample_index,
                "data_source": s.example.data_source,
                "prompt": prompt_messages(s.example),
                "ground_truth": s.example.ground_truth,
                "response": s.completion.text,
                "finish_reason": s.completion.finish_reason,
                **turn_fields(s.completion),
                **({"versions": s.completion.versions} if s.completion.versions is not None else {}),
                **identity_fields(verdict_grader(s)),  # the component that judged, when composed
                **s.grade.to_dict(),
                **(s.composed.row() if s.composed is not None else {}),
            }
            for s in rollouts
        ]
        if self.cfg.logging.samples:
            write_rows(self.run_dir / "samples" / f"step_{step}.jsonl", self._sample_rows)

    def _check_grading(self, rollouts: Rollouts, step: int) -> None:
        samples_file = self.run_dir / "samples" / f"step_{step}.jsonl" if self.cfg.logging.samples else None
        warning = check_grading(
            rollouts.samples,
            step=step,
            warn_share=self.cfg.grading.warn_error_share,
            samples_file=samples_file,
        )
        if warning is not None:
            self.console.print("[yellow]warning:[/yellow]", escape(warning), highlight=False)

    def _rollout_metrics(self, rollouts: Rollouts) -> dict[str, float]:
        """Reward / verdict / length statistics over every sample of the step (judged ones for rewards)."""
        rewards, judged = rewards_and_mask(
            rollouts.samples, max_tokens=self.cfg.rollout.max_tokens, overlong=self.cfg.algorithm.overlong
        )
        return {**sample_metrics(rollouts.samples, rewards, judged), "grading/masked": float((~judged).sum())}

    @staticmethod
    def _timings(trace: StepTrace, step: int, t_step: float, flow: dict[str, float]) -> dict[str, float]:
        """The step's stage seconds and gen tok/s: the tokens generated inside its generation time
        (``generated_tokens``: on a continuous step not the trained groups' tokens) over that time."""
        spans = trace.stage_seconds(step)
        gen_s = spans.get("time/generate_s", 0.0)
        generated = generated_tokens(flow)
        return {
            **spans,
            "time/step_s": time.time() - t_step,
            "throughput/gen_tokens_per_s": generated / gen_s if gen_s > 0 else 0.0,
        }

    # ------------------------------------------------------------------------------ eval / checkpoint
    def _eval(
        self, parts: Components, trace: StepTrace, log: MetricsLogger, step: int, summary: RunSummary
    ) -> EvalResult:
        cfg = self.cfg
        with trace.span("eval", step) as attrs:
            parts.engine_ready(version=step)  # after step's update (step 0: the start weights)
            assert self.frontier is not None, "run() builds the frontier before the first eval"
            engine = parts.eval_engine(self.frontier.engine)
            if self.frontier.engine is engine:
                self.frontier.park(everything=True)  # its requests wait while eval's own frontier runs
            result = evaluate(
                engine,
                parts.pool,
                parts.val_prompts,
                cfg.eval,
                max_tokens=cfg.rollout.max_tokens,
                stop=cfg.rollout.stop,
                rewards=self.rewards,
                seed=cfg.run.seed,
                tokenizer=parts.tokenizer,
                tools=parts.tools,
            )
            attrs["prompts"] = len(result.rows)
        write_rows(self.run_dir / "eval" / f"step_{step}.jsonl", result.rows)
        log.log(step, result.metrics)
        summary.last_eval = result.metrics
        acc = result.metrics.get("eval/mean_score", float("nan"))
        log.note(f"eval @ step {step}: mean score {acc:.3f} on {len(result.rows)} prompts")
        return result

    def _checkpoint(
        self, parts: Components, finished: FinishedStep, trace: StepTrace, log: MetricsLogger
    ) -> None:
        step = finished.step
        self._saving = True
        with interrupts_held(f"the checkpoint of step {step}"):
            with trace.span("checkpoint", step) as attrs:
                path = self.ckpt.save(
                    step,
                    parts.save_checkpoint,  # self-contained: the model's config + tokenizer files too
                    {
                        "data": finished.data,
                        "frontier": finished.frontier,
                        "grader_cache": str(parts.cache_path) if parts.cache_path else None,
                        "config": self.cfg.model_dump(mode="json"),
                        "model_dir": str(parts.model_dir.resolve()),
                        "data_fingerprint": data_fingerprint([p.example for p in parts.train_prompts]),
                    },
                    rng=finished.rng,
                )
                attrs["path"] = str(path)
            log.note(f"checkpoint saved: {path}")
        self._saving = False

    def _save_on_interrupt(self, parts: Components, trace: StepTrace, log: MetricsLogger) -> None:
        """The first Ctrl-C: save the last finished step unless a checkpoint of it exists (or was being written
        when a second Ctrl-C came: that one means stop now). Interrupted inside an update (only where Ctrl-C
        cannot be held) the models are half-updated: nothing is saved from them."""
        finished, latest = self.finished, self.ckpt.latest()
        if finished is None or self._saving or (latest is not None and latest.step >= finished.step):
            return
        if self.guard.updating:
            log.note(
                f"interrupted inside step {finished.step + 1}'s update: no checkpoint of its half-moved models"
            )
            return
        log.note(f"interrupt: saving step {finished.step}, the last finished step")
        try:
            self._checkpoint(parts, finished, trace, log)
        except KeyboardInterrupt:
            log.note(f"the checkpoint of step {finished.step} was stopped; nothing saved")


class StepTrace(TraceWriter):
    """The run trace, also keeping per-step stage totals so the metrics line reports the same timings."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.totals: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        super().__init__(*args, **kwargs)

    def _write(self, record: dict[str, Any]) -> None:
        super()._write(record)
        if record.get("type") == "span":
            self.totals[int(record["step"])][str(record["stage"])] += float(record["end"]) - float(
                record["start"]
            )

    def stage_seconds(self, step: int) -> dict[str, float]:
        return {f"time/{stage}_s": seconds for stage, seconds in self.totals.pop(step, {}).items()}
