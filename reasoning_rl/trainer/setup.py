"""Build everything a run needs from its config (data, tokenizer, policy, reference, engine, grading pool)
and the per-step operations on them (update, weight hand-off), so the loop reads as the algorithm."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

import graders
from graders.runtime import GradingPool
from reasoning_rl.algorithms import LossConfig, compute_advantages, kl_penalized_rewards
from reasoning_rl.algorithms.rollout_correction import CorrectionConfig, correction_weights, mismatch_metrics
from reasoning_rl.config import Config, ConfigError
from reasoning_rl.data import Example, LoadReport, load_examples, render_all
from reasoning_rl.freshness import FreshnessGate
from reasoning_rl.rollout import RolloutEngine, SamplingConfig, make_engine
from reasoning_rl.rollout.base import EngineKind
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.collect import Sample
from reasoning_rl.trainer.governance import run_graders, selftest_or_raise
from reasoning_rl.trainer.ppo import explained_variance, gae_targets, token_rewards

CRITIC_FILE = "critic.pt"


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("run.device=cuda but no CUDA device is visible; use run.device=auto or cpu")
    return device


def resolve_model_dir(cfg: Config) -> Path:
    """A local HF model dir for both trainer and vLLM; a GGUF checkpoint is converted once and cached."""
    from reasoning_rl.policy.model import convert_gguf

    if cfg.model.gguf_file is None:
        return Path(cfg.model.path)
    stem = Path(cfg.model.gguf_file).stem.lower().replace(".", "-")
    return convert_gguf(cfg.model.path, cfg.model.gguf_file, Path(".cache") / "converted" / stem)


def load_data(cfg: Config, tokenizer: Any, console: Console) -> tuple[list[Example], list[list[int]],
                                                                    list[Example], list[list[int]]]:
    known = frozenset(graders.available())
    report = LoadReport()
    train = load_examples(cfg.data.train, cfg.data, seed=cfg.run.seed, known_graders=known, report=report)
    val = load_examples(cfg.data.val, cfg.data, seed=cfg.run.seed + 1, known_graders=known, report=report) \
        if cfg.data.val else []
    skip = cfg.data.on_bad_row == "skip"
    train, train_ids, n_long = render_all(tokenizer, train, chat_template=cfg.data.chat_template,
                                          max_prompt_tokens=cfg.data.max_prompt_tokens, skip_long=skip)
    val, val_ids, n_long_val = render_all(tokenizer, val, chat_template=cfg.data.chat_template,
                                          max_prompt_tokens=cfg.data.max_prompt_tokens, skip_long=skip)
    sources = ", ".join(f"{k}: {v}" for k, v in report.kept.items())
    console.print(f"data: {len(train)} train / {len(val)} val prompts ({sources})")
    skipped = len(report.skipped) + n_long + n_long_val
    if skipped:
        console.print(f"[yellow]skipped {skipped} malformed or too-long rows[/yellow] (first: "
                      f"{report.skipped[0] if report.skipped else 'prompt over data.max_prompt_tokens'})")
    return train, train_ids, val, val_ids


@dataclass
class Components:
    cfg: Config
    device: str
    model_dir: Path
    tokenizer: Any
    policy: Any
    ref: Any
    critic: Any
    engine: RolloutEngine
    pool: GradingPool
    train_examples: list[Example]
    train_prompt_ids: list[list[int]]
    val_examples: list[Example]
    val_prompt_ids: list[list[int]]
    cache_path: Path | None
    seed_per_sample: bool
    trace_meta: dict[str, Any] = field(default_factory=dict)
    freshness: FreshnessGate | None = None
    _awake: bool = True

    # --------------------------------------------------------------------------------- generation
    def sampling(self, seed: int) -> SamplingConfig:
        r = self.cfg.rollout
        return SamplingConfig(n=r.n, temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens,
                              stop=tuple(r.stop), seed=seed if self.seed_per_sample else None, ignore_eos=r.ignore_eos,
                              logprobs=self.needs_rollout_logprobs())

    def engine_ready(self) -> None:
        """Awake and holding the policy's current weights (a sleep for the update drops them)."""
        if not self._awake:
            self.push_weights(step=0, trace=None)

    def _wake(self) -> None:
        if not self._awake:
            self.engine.wake()
            self._awake = True

    def engine_sleep(self) -> None:
        """Free the engine's memory for the update. Its weights are dropped too: ``push_weights`` (which
        always follows the update) wakes it and loads the new ones."""
        if self._awake and self.cfg.rollout.sleep is not False:
            self.engine.sleep(keep_weights=False)
            self._awake = False

    # ------------------------------------------------------------------------------------- update
    def loss_config(self) -> LossConfig:
        a = self.cfg.algorithm
        return LossConfig(clip_low=a.clip_low, clip_high=a.clip_high, dual_clip=a.dual_clip, level=a.ratio,
                          kl_coef=a.kl_coef, kl_estimator=a.kl_estimator, kl_in_reward=a.kl_mode == "reward",
                          entropy_coef=a.entropy_coef, agg=a.loss_agg, max_response_len=self.cfg.rollout.max_tokens)

    def update(self, samples: list[Sample], rewards: torch.Tensor, mask: torch.Tensor, *, trace: TraceWriter,
               step: int) -> dict[str, float]:
        """Ref/old log-probs -> advantages (outcome estimator, or critic values + GAE for PPO) -> ``epochs``
        passes over mini-batches, each a policy step (and a critic step for PPO). Masked samples are
        dropped from the batch entirely (they carry no gradient and do not distort normalisation)."""
        from reasoning_rl.policy import build_batch

        a = self.cfg.algorithm
        self.engine_sleep()
        keep = [i for i in range(len(samples)) if bool(mask[i]) and samples[i].completion.token_ids]
        out: dict[str, float] = {}
        if not keep:
            out["update/skipped"] = 1.0
            return out
        batch = build_batch([samples[i].completion for i in keep], pad_id=self.pad_id)
        groups = torch.tensor([samples[i].group for i in keep])
        r = rewards[keep]
        loss_cfg = self.loss_config()
        n = len(keep)
        mb = min(a.mini_batch_size or n, n)
        single_update = a.epochs == 1 and mb == n
        corr = a.rollout_correction
        reuse = (a.old_logprobs == "rollout" or (a.old_logprobs == "auto" and single_update)) and not corr.enabled
        old: torch.Tensor | None
        if self._uses_own_logprobs(single_update):
            old = None  # one update on fresh samples: ratio 1 against the policy's own detached log-probs
        elif reuse and batch.rollout_logprobs is not None:
            old = batch.rollout_logprobs
        else:
            with trace.span("old_logprobs", step):
                old, _ = self.policy.logprobs(batch)
            out.update(_rollout_gap(batch, old, corr.mismatch_threshold))
        weights = None
        if corr.enabled:
            if old is None or batch.rollout_logprobs is None:
                raise RuntimeError("algorithm.rollout_correction needs the engine's sampling log-probs (it did not "
                                  "return them for this batch)")
            weights, corr_stats = correction_weights(old, batch.rollout_logprobs, batch.response_mask, CorrectionConfig(
                tis_cap=corr.tis_cap, mis=corr.mis, mis_level=corr.mis_level, mis_low=corr.mis_low,
                mis_high=corr.mis_high))
            out.update(corr_stats)
        ref = None
        if self.ref is not None:
            with trace.span("ref_logprobs", step):
                ref = self.ref.logprobs(batch)
        kl_ref = ref if a.kl_mode == "reward" and a.kl_coef > 0 else None
        value_targets: tuple[torch.Tensor, torch.Tensor] | None = None  # (rollout values, returns) for PPO
        if a.advantage == "gae":  # PPO: the config validator pairs it with name=ppo, which builds the critic
            assert old is not None  # _uses_own_logprobs() is False for GAE
            with trace.span("values", step):
                values = self.critic.values(batch)
            token_r = token_rewards(r, batch.response_mask, a.kl_coef, old, kl_ref, a.kl_estimator)
            adv, returns = gae_targets(token_r, values, batch.response_mask, a.gamma, a.lam)
            ev = explained_variance(values, returns, batch.response_mask)
            if math.isfinite(ev):
                out["critic/explained_variance"] = ev
            out["critic/values_mean"] = float(values[batch.response_mask].mean())
            out["critic/returns_mean"] = float(returns[batch.response_mask].mean())
            value_targets = (values, returns)
        else:
            if kl_ref is not None:
                assert old is not None  # _uses_own_logprobs() is False with a KL reward
                r = kl_penalized_rewards(r, old, kl_ref, batch.response_mask, a.kl_coef, a.kl_estimator)
            adv = compute_advantages(a.advantage, r, groups, torch.ones_like(r, dtype=torch.bool))
        stats: dict[str, list[float]] = {}
        critic_stats: dict[str, list[float]] = {}
        with trace.span("update", step) as attrs:
            for epoch in range(a.epochs):
                order = torch.randperm(n).tolist() if epoch and a.epochs > 1 else list(range(n))
                for start in range(0, n, mb):
                    rows = order[start:start + mb]
                    sub = batch.select(rows)
                    m = self.policy.train_step(sub, adv[rows], None if old is None else old[rows, :sub.shape[1]],
                                               None if ref is None else ref[rows, :sub.shape[1]], loss_cfg,
                                               token_weights=None if weights is None else weights[rows, :sub.shape[1]])
                    for k, v in m.items():
                        stats.setdefault(k, []).append(float(v))
                    if value_targets is not None:
                        t = sub.shape[1]
                        cm = self.critic.train_step(sub, value_targets[1][rows, :t], value_targets[0][rows, :t])
                        for k, v in cm.items():
                            critic_stats.setdefault(k, []).append(float(v))
            attrs["tokens"] = batch.num_tokens * a.epochs
        trace.counter("tokens_trained", step, batch.num_tokens * a.epochs)
        if torch.cuda.is_available():
            trace.counter("gpu_mem_peak_bytes", step, torch.cuda.max_memory_allocated())
        for prefix, collected in (("policy", stats), ("critic", critic_stats)):
            for k, xs in collected.items():
                out[f"{prefix}/{k}"] = sum(xs) / len(xs)
        out["advantage/abs_mean"] = float(adv.abs()[batch.response_mask].mean() if adv.dim() == 2
                                          else adv.abs().mean())
        out["throughput/train_tokens"] = float(batch.num_tokens * a.epochs)
        return out

    def _uses_own_logprobs(self, single_update: bool) -> bool:
        """``old_logprobs=auto`` with one update per batch, where the old log-probs feed only the policy loss
        (no GAE, no KL penalty in the reward): the loss takes the policy's own, detached."""
        a = self.cfg.algorithm
        only_in_loss = a.advantage != "gae" and not (a.kl_mode == "reward" and a.kl_coef > 0)
        return a.old_logprobs == "auto" and single_update and only_in_loss and not a.rollout_correction.enabled

    def needs_rollout_logprobs(self) -> bool:
        """Whether the engine must return log-probs: not when the update uses the policy's own (which spares
        the engine per-token bookkeeping). Decided from the config, before generation: masking only ever
        shrinks a batch towards a single update."""
        a, t = self.cfg.algorithm, self.cfg.trainer
        single = a.epochs == 1 and (a.mini_batch_size is None or a.mini_batch_size >= t.batch_size * self.cfg.rollout.n)
        return not self._uses_own_logprobs(single)

    @property
    def pad_id(self) -> int:
        pad = getattr(self.tokenizer, "pad_token_id", None)
        return int(pad if pad is not None else 0)

    def lr(self) -> float:
        return float(self.policy.optimizer.param_groups[0]["lr"])

    # ------------------------------------------------------------------------------------ hand-off
    def push_weights(self, *, step: int, trace: TraceWriter | None) -> dict[str, float]:
        from reasoning_rl.handoff import push_weights

        self._wake()
        start = time.time()
        stats = push_weights(self.policy, self.engine, gate=self.freshness, step=step)
        if trace is not None:
            trace.add_span("handoff", step, start, start + stats.seconds, tensors=stats.tensors, bytes=stats.bytes)
            trace.counter("handoff_bytes", step, stats.bytes)
            if stats.check is not None:
                end = start + stats.seconds
                trace.add_span("handoff_check", step, end, end + stats.check.seconds, probe_gap=stats.check.probe_gap)
        return stats.as_metrics()

    def policy_export(self, out_dir: Path) -> Path:
        """A plain HF model dir (safetensors + tokenizer), written atomically by the policy."""
        self.policy.save_pretrained(out_dir)
        return out_dir

    def save_checkpoint(self, directory: Path) -> None:
        """Model, optimizer, scheduler and optimizer-step count, and the critic's for PPO (the checkpoint
        manager adds the rest)."""
        torch.save(self.policy.state_dict_for_checkpoint(), directory / "policy.pt")
        if self.critic is not None:
            torch.save(self.critic.state_dict_for_checkpoint(), directory / CRITIC_FILE)

    def load_checkpoint(self, directory: Path) -> None:
        self.policy.load_checkpoint_state(torch.load(directory / "policy.pt", weights_only=False))
        if self.critic is not None:
            path = directory / CRITIC_FILE
            if not path.exists():
                raise ConfigError(f"{directory} has no {CRITIC_FILE}: it was not saved by a PPO run, so it cannot "
                                  "resume one (algorithm.name=ppo needs the critic's state)")
            self.critic.load_checkpoint_state(torch.load(path, weights_only=False))

    def close(self) -> None:
        self.pool.close()


def _rollout_gap(batch: Any, old: torch.Tensor, threshold: float) -> dict[str, float]:
    """How far the engine's log-probs are from the trainer's for the same tokens (kernel/dtype drift,
    or a broken hand-off when large): reported, never hidden (``mismatch/*``: rollout_correction.py)."""
    if batch.rollout_logprobs is None:
        return {}
    mask = batch.response_mask
    diff = (old.float() - batch.rollout_logprobs.float()).abs()[mask]
    return {"rollout/logprob_diff_mean": float(diff.mean()), "rollout/logprob_diff_max": float(diff.max()),
            **mismatch_metrics(old, batch.rollout_logprobs, mask, threshold)}


def build_components(cfg: Config, run_dir: Path, *, console: Console) -> Components:
    from reasoning_rl.policy import Policy
    from reasoning_rl.policy.model import load_tokenizer

    device = resolve_device(cfg.run.device)
    model_dir = resolve_model_dir(cfg)
    tokenizer = load_tokenizer(str(model_dir), require_chat_template=cfg.data.chat_template)
    train, train_ids, val, val_ids = load_data(cfg, tokenizer, console)
    dtype = cfg.model.dtype if cfg.model.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
    o = cfg.optim
    compiled, seeded = device_defaults(cfg, device)
    console.print(f"model: {model_dir} on {device} ({dtype}{', compiled' if compiled else ''})")
    fsdp = {"auto": None, "on": True, "off": False}[cfg.model.fsdp]
    trainable: dict[str, Any] = dict(  # what the policy and the critic share; each brings its own lr
        dtype=dtype, device=device, fsdp=fsdp, weight_decay=o.weight_decay, betas=o.betas, grad_clip=o.grad_clip,
        warmup_steps=o.warmup_steps, total_steps=cfg.trainer.steps if o.schedule == "cosine" else None,
        activation_checkpointing=cfg.model.gradient_checkpointing, compile_layers=compiled,
        micro_batch_tokens=cfg.algorithm.micro_batch_tokens,
    )
    policy = Policy.from_pretrained(str(model_dir), lr=o.lr, **trainable)
    ref = None
    if cfg.algorithm.kl_coef > 0:
        from reasoning_rl.policy import ReferencePolicy

        ref = ReferencePolicy.from_pretrained(str(model_dir), dtype=dtype, device=device, fsdp=fsdp,
                                              offload=cfg.model.ref_offload,
                                              micro_batch_tokens=cfg.algorithm.micro_batch_tokens)
    critic = None
    if cfg.algorithm.name == "ppo":
        from reasoning_rl.policy import Critic

        critic = Critic.from_pretrained(str(model_dir), lr=o.critic_lr, **trainable)
    r = cfg.rollout
    console.print(f"rollout: {rollout_kind(cfg)} engine, n={r.n}, max_tokens={r.max_tokens}")
    engine = build_engine(cfg, model_dir, device, train_ids + val_ids, max(r.max_tokens, cfg.eval.max_tokens or 0),
                          dtype=dtype, sleep=r.sleep)
    g = cfg.grading
    cache_path = run_dir / "grades.sqlite" if g.cache else None
    pool = GradingPool(workers=g.workers, backend=g.backend, ray_address=g.ray_address, timeout_s=g.timeout_s,
                       retries=g.retries, cache_path=cache_path, max_in_flight=g.max_in_flight)
    used = [ex.grader for ex in train + val]
    if g.selftest:
        selftest_or_raise(used, pool, console)
    meta = {"run": cfg.run.name, "device": device, "world_size": 1, "model": _model_shape(policy, dtype),
            "graders": run_graders(used)}
    gate = FreshnessGate.for_run(engine, train_ids, r.freshness_probe_tol) if r.freshness_check else None
    return Components(cfg, device, model_dir, tokenizer, policy, ref, critic, engine, pool, train, train_ids, val, val_ids,
                      cache_path, seeded, meta, freshness=gate)


def build_engine(cfg: Config, model_dir: Path, device: str, prompt_ids: list[list[int]], max_tokens: int, *,
                 dtype: str, sleep: bool | None) -> RolloutEngine:
    """The rollout engine of ``cfg.rollout`` (training and ``rrl eval`` alike), sized for these prompts."""
    r = cfg.rollout
    kind = rollout_kind(cfg)
    extra = dict(r.engine_args) if kind == "vllm" else {}
    try:
        return make_engine(kind, str(model_dir), dtype=dtype, seed=cfg.run.seed,
                           gpu_memory_utilization=r.gpu_memory_utilization or (0.5 if device == "cuda" else 0.2),
                           max_model_len=model_max_len(model_dir, prompt_ids, max_tokens), enable_sleep_mode=sleep,
                           **extra)
    except TypeError as e:  # vLLM names the unknown argument
        if not extra:
            raise
        raise ConfigError(f"rollout.engine_args {sorted(extra)}: vLLM rejected them ({e})") from e


def device_defaults(cfg: Config, device: str) -> tuple[bool, bool]:
    """(model.compile, rollout.seed_per_sample) with None resolved for ``device``: compiled and one sampling
    stream on CUDA (speed), eager and per-sample seeds on CPU (no compile wait, exact reproducibility)."""
    compiled = cfg.model.compile if cfg.model.compile is not None else device == "cuda"
    seeded = cfg.rollout.seed_per_sample if cfg.rollout.seed_per_sample is not None else device != "cuda"
    return compiled, seeded


def model_max_len(model_dir: Path, prompt_ids: list[list[int]], max_tokens: int) -> int:
    """Longest prompt + response budget, so the engine reserves no more than the run needs."""
    import json

    need = max((len(p) for p in prompt_ids), default=1) + max_tokens
    conf = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    limit = conf.get("max_position_embeddings")
    if limit is not None and need > int(limit):
        raise ConfigError(f"longest prompt + rollout.max_tokens = {need} tokens exceeds the model's "
                          f"max_position_embeddings={limit}; lower rollout.max_tokens or data.max_prompt_tokens")
    return need


def rollout_kind(cfg: Config) -> EngineKind:
    """``rollout.engine=auto``: vLLM when importable, else the plain transformers engine."""
    import importlib.util

    if cfg.rollout.engine != "auto":
        return cfg.rollout.engine
    return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"


def _model_shape(policy: Any, dtype: str) -> dict[str, Any]:
    model = getattr(policy, "lm", None)
    conf = getattr(model, "config", None)
    if conf is None:
        return {"dtype": dtype}
    params = sum(p.numel() for p in model.parameters()) if model is not None else None
    return {"params": params, "layers": getattr(conf, "num_hidden_layers", None),
            "hidden": getattr(conf, "hidden_size", None), "vocab": getattr(conf, "vocab_size", None), "dtype": dtype}
