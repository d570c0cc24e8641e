"""Build everything a run needs from its config: data, tokenizer, the group of model workers (each rank builds
its policy, reference, critic and rollout engine with ``reasoning_rl.factory`` from the ``WorkerSpec`` resolved
here), the grading pool and the step plan, held in ``Components`` with the few operations that move state
between them (sampling request, engine sleep / weight hand-off, checkpoint files)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

import graders
from graders.runtime import GradingPool
from reasoning_rl.config import Config
from reasoning_rl.data import LoadReport, Prompt, load_examples, render_all, screen_golds
from reasoning_rl.distributed.group import LocalRanks, WorkerGroup
from reasoning_rl.distributed.views import GroupEngine, group_models
from reasoning_rl.distributed.worker import ModelWorker, WorkerSpec
from reasoning_rl.factory import (
    Models,
    device_defaults,
    engine_for,
    model_max_len,
    resolve_device,
    resolve_model_dir,
    rollout_kind,
    run_dtype,
)
from reasoning_rl.rollout import ContinuousEngine, RolloutEngine, SamplingConfig
from reasoning_rl.rollout.stepped import as_continuous
from reasoning_rl.rollout.toolset import ToolSet, prompt_tools
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.collect import RewardPlan
from reasoning_rl.trainer.governance import run_graders, selftest_or_raise
from reasoning_rl.trainer.plan import StepPlan, step_plan

PROBE_PROMPTS = 2  # the freshness probe scores the first prompts (Probe.from_prompts takes 2)

if TYPE_CHECKING:
    pass


def load_data(cfg: Config, tokenizer: Any, console: Console) -> tuple[list[Prompt], list[Prompt]]:
    """(train, val) prompts, rendered; malformed / too-long rows raise or (data.on_bad_row=skip) are counted."""
    known = frozenset(graders.available())
    report = LoadReport()
    train = load_examples(cfg.data.train, cfg.data, seed=cfg.run.seed, known_graders=known, report=report)
    val = (
        load_examples(cfg.data.val, cfg.data, seed=cfg.run.seed + 1, known_graders=known, report=report)
        if cfg.data.val
        else []
    )
    train, bad_train = screen_golds(train, "train", cfg.data.bad_gold)
    val, bad_val = screen_golds(val, "val", cfg.data.bad_gold) if val else (val, None)
    for bad in (bad_train, bad_val):
        if bad is not None:
            console.print(f"[yellow]warning:[/yellow] excluded {bad.line()} (data.bad_gold)", highlight=False)
    skip = cfg.data.on_bad_row == "skip"
    tools = prompt_tools(cfg.rollout)
    train_prompts, n_long = render_all(
        tokenizer,
        train,
        chat_template=cfg.data.chat_template,
        max_prompt_tokens=cfg.data.max_prompt_tokens,
        skip_long=skip,
        tools=tools,
    )
    val_prompts, n_long_val = render_all(
        tokenizer,
        val,
        chat_template=cfg.data.chat_template,
        max_prompt_tokens=cfg.data.max_prompt_tokens,
        skip_long=skip,
        tools=tools,
    )
    sources = ", ".join(f"{k}: {v}" for k, v in report.kept.items())
    console.print(f"data: {len(train_prompts)} train / {len(val_prompts)} val prompts ({sources})")
    for note in report.notes():
        console.print(note, markup=False, highlight=False)
    skipped = len(report.skipped) + n_long + n_long_val
    if skipped:
        console.print(
            f"[yellow]skipped {skipped} malformed or too-long rows[/yellow] (first: "
            f"{report.skipped[0] if report.skipped else 'prompt over data.max_prompt_tokens'})"
        )
    return train_prompts, val_prompts


@dataclass
class Components:
    """What ``build_components`` made for a run, and the few operations that move state between the parts
    (the engine request, engine sleep / weight hand-off, checkpoint files); the step itself is in ``loop``.

    ``models`` and ``engine`` are views of ``group`` (``reasoning_rl.distributed``): the model work of every
    rank, one rank in this process or several Ray actors. Parts built by hand (tests) get a one-rank group
    over the models and engine they pass."""

    cfg: Config
    device: str
    model_dir: Path
    tokenizer: Any
    models: Models
    engine: RolloutEngine
    pool: GradingPool
    train_prompts: list[Prompt]
    val_prompts: list[Prompt]
    cache_path: Path | None
    seed_per_sample: bool
    plan: StepPlan
    trace_meta: dict[str, Any] = field(default_factory=dict)
    group: WorkerGroup = None  # type: ignore[assignment]  # set in __post_init__ when not given
    tools: ToolSet | None = None  # rollout.tools: multi-turn tool rollouts (run by the driver)

    def __post_init__(self) -> None:
        if self.group is None:
            self.group = WorkerGroup.local(ModelWorker(self.models, self.engine, tokenizer=self.tokenizer))

    @property
    def policy(self) -> Any:
        return self.models.policy

    # --------------------------------------------------------------------------------- generation
    def rollout_engine(self) -> ContinuousEngine:
        """The engine the run's frontier drives: one that keeps requests across updates (an in-process vllm /
        hf engine, the generating Ray ranks as one ``RemoteEngine``), else the engine driven step by step
        (``as_continuous``: plugin engines that only generate)."""
        engine = self.group.continuous_engine()
        return engine if engine is not None else as_continuous(self.engine)

    def eval_engine(self, training: ContinuousEngine) -> ContinuousEngine:
        """The engine eval's frontier drives: the training frontier's own where it is in this process (whose
        requests the trainer parks first), else the ranks' engine view stepped (their ``generate``)."""
        if isinstance(self.group.backend, LocalRanks):
            return training
        return as_continuous(self.engine)

    def sampling(self, seed: int) -> SamplingConfig:
        """The engine request of a training step: ``rollout.*``, and log-probs exactly when the plan uses them."""
        return SamplingConfig.of(
            self.cfg.rollout, seed=seed if self.seed_per_sample else None, logprobs=self.plan.engine_logprobs
        )

    def engine_ready(self, version: int) -> None:
        """Awake and holding the policy's current weights, policy ``version`` (the updates done): a sleep for
        the update drops them, and reloading them is their version's load, never version 0's. An engine at
        another version is a missed hand-off: an error, not something to reload over."""
        if self.engine.asleep:
            self.push_weights(version=version, trace=None)
        held = self.engine.version
        if held != version:
            raise RuntimeError(
                f"the engine holds policy version {held}, the policy is at {version}: a missed hand-off"
            )

    def engine_sleep(self) -> None:
        """Free the engine's memory for the trainer's passes. Its weights are dropped too: ``push_weights``
        (which always follows the update) wakes it and loads the new ones. The engine owns the state."""
        if self.cfg.rollout.sleep is not False:
            self.engine.sleep(keep_weights=False)

    def lr(self) -> float:
        return float(self.group.call_all(ModelWorker.lr)[0])

    # ------------------------------------------------------------------------------------ hand-off
    def push_weights(self, *, version: int, trace: TraceWriter | None) -> dict[str, float]:
        """Every rank streams its policy shards, policy ``version`` (the updates done: step k's update makes
        version k, traced as step k), into its own engine (woken first), which records that version; rank 0's
        stats are the step's metrics, and each rank's bytes and GB/s go to the trace."""
        step = version
        start = time.time()
        per_rank = self.group.push_weights(version, self.cfg.rollout.handoff_bucket_mb << 20)
        stats = per_rank[0]
        if trace is not None:
            for rank, comm in enumerate(self.group.call_all(ModelWorker.comm_bytes)):
                where = {"rank": rank} if len(per_rank) > 1 else {}
                for kind, n in {"handoff": per_rank[rank].bytes, **comm}.items():
                    trace.counter("comm_bytes", step, n, kind=kind, **where)
            trace.add_span(
                "handoff", step, start, start + stats.seconds, tensors=stats.tensors, bytes=stats.bytes
            )
            if len(per_rank) == 1:
                trace.counter("handoff_bytes", step, stats.bytes)
            else:
                for rank, s in enumerate(per_rank):
                    trace.counter("handoff_bytes", step, s.bytes, rank=rank)
                    trace.counter("handoff_gbps", step, s.gbps, rank=rank)
            if stats.check is not None:
                end = start + stats.seconds
                trace.add_span(
                    "handoff_check", step, end, end + stats.check.seconds, probe_gap=stats.check.probe_gap
                )
            if stats.overlap_tokens is not None:
                trace.counter("overlap_tokens", step, stats.overlap_tokens)
        metrics = dict(stats.as_metrics())
        if stats.overlap_tokens is not None:  # split placement's live rollout ranks decoded during the update
            metrics["rollout/overlap_tokens"] = float(stats.overlap_tokens)
        return metrics

    def trace_ranks(self, trace: TraceWriter, step: int) -> None:
        """With several ranks: the step's driver <-> worker bytes, each rank's seconds per operation, and each
        rank's memory high-water mark (one rank in-process sends nothing: no counters)."""
        if self.group.world == 1:
            return
        traffic = self.group.take_traffic()
        trace.counter("dispatch_bytes", step, traffic.to_workers, direction="to_workers")
        trace.counter("dispatch_bytes", step, traffic.from_workers, direction="from_workers")
        for (method, rank), seconds in sorted(traffic.seconds.items()):
            trace.counter("worker_seconds", step, seconds, rank=rank, method=method)
        for st in self.group.call_all(ModelWorker.stats):
            where = {"rank": st["rank"], "node": st["node"], "node_id": st.get("node_id")}
            trace.counter("worker_rss_peak_bytes", step, st["rss_peak_bytes"], **where)
            if "gpu_mem_peak_bytes" in st:
                trace.counter("gpu_mem_peak_bytes", step, st["gpu_mem_peak_bytes"], rank=st["rank"])
        self.group.take_traffic()  # the stats call itself is bookkeeping, not the step's traffic

    def policy_export(self, out_dir: Path) -> Path:
        """A plain HF model dir (safetensors + tokenizer), written atomically by the policy (rank 0)."""
        self.group.call_all(ModelWorker.export, out_dir)
        return out_dir

    def save_checkpoint(self, directory: Path) -> None:
        """Model, optimizer, scheduler and optimizer-step count, the critic's for PPO, and the model's config
        + tokenizer files (self-contained: exportable anywhere); the checkpoint manager adds the rest. With
        several ranks ``directory`` must be on a file system every node sees."""
        self.group.call_all(ModelWorker.save_checkpoint, directory)

    def load_checkpoint(self, directory: Path) -> None:
        self.group.call_all(ModelWorker.load_checkpoint, directory)

    def close(self) -> None:
        try:
            self.pool.close()
            if self.tools is not None:
                self.tools.close()
        finally:
            self.group.close()


def build_components(cfg: Config, run_dir: Path, *, console: Console) -> Components:
    """The driver's parts (data, tokenizer, grading pool, plan) and the group of model workers."""
    from reasoning_rl.distributed.launch import start_group
    from reasoning_rl.policy.model import load_tokenizer

    device = resolve_device(cfg.run.device)
    model_dir = resolve_model_dir(cfg)
    tokenizer = load_tokenizer(str(model_dir), require_chat_template=cfg.data.chat_template is True)
    train, val = load_data(cfg, tokenizer, console)
    dtype = run_dtype(cfg, device)
    compiled, seeded = device_defaults(cfg, device)
    console.print(f"model: {model_dir} on {device} ({dtype}{', compiled' if compiled else ''})")
    r = cfg.rollout
    console.print(f"rollout: {rollout_kind(cfg)} engine, n={r.n}, max_tokens={r.max_tokens}")
    spec = WorkerSpec(
        cfg,
        model_dir,
        device,
        dtype,
        model_max_len(model_dir, train + val, max(r.max_tokens, cfg.eval.max_tokens or 0)),
        tuple(tuple(p.token_ids) for p in train[:PROBE_PROMPTS]) if r.freshness_check else (),
    )
    rewards = RewardPlan(cfg.grading)
    rewards.check(p.example for p in train + val)  # a grader's context fields exist in every row
    group = start_group(spec, console=console)
    g = cfg.grading
    cache_path = run_dir / "grades.sqlite" if g.cache else None
    try:
        pool = GradingPool(
            workers=g.workers,
            backend=g.backend,
            ray_address=g.ray_address,
            timeout_s=g.timeout_s,
            retries=g.retries,
            cache_path=cache_path,
            max_in_flight=g.max_in_flight,
        )
        used = sorted(rewards.graders(p.example for p in train + val))  # every reward component's grader
        if g.selftest:
            selftest_or_raise(used, pool, console, g.options)
        meta = {
            "run": cfg.run.name,
            "device": device,
            "world_size": group.world,
            "model": group.call_all(ModelWorker.model_shape, dtype)[0],
            "graders": run_graders(used),
        }
    except BaseException:
        group.close()
        raise
    pad = getattr(tokenizer, "pad_token_id", None)
    plan = step_plan(cfg, pad_id=int(pad if pad is not None else 0))
    console.print(f"old log-probs: {plan.old_source}")
    models = group_models(group, ref=cfg.algorithm.kl_coef > 0, critic=cfg.algorithm.name == "ppo")
    return Components(
        cfg,
        device,
        model_dir,
        tokenizer,
        models,
        GroupEngine(group),
        pool,
        train,
        val,
        cache_path,
        seeded,
        plan,
        meta,
        group=group,
        tools=ToolSet.from_config(r, tokenizer),
    )


def build_engine(
    cfg: Config,
    model_dir: Path,
    device: str,
    prompts: list[Prompt],
    max_tokens: int,
    *,
    dtype: str,
    sleep: bool | None,
) -> RolloutEngine:
    """The rollout engine of ``cfg.rollout`` (training and ``rrl eval`` alike), sized for these prompts."""
    return engine_for(
        cfg, model_dir, device, model_max_len(model_dir, prompts, max_tokens), dtype=dtype, sleep=sleep
    )
