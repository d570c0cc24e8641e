"""``ModelWorker``: one training rank's model work (its FSDP2 shard of the policy, reference and critic, and its
colocated rollout engine), behind the operations a step needs.

The same class serves both paths: with one rank it is called directly in the driver process (no Ray, no
process group: the single-GPU path as it always was); with several, each Ray actor of ``launch`` builds one
after joining the ``torch.distributed`` group, and ``WorkerGroup`` calls the same methods on every rank with
that rank's rows. Collective methods (scoring, ``train_step``, ``push_weights``, checkpoint save/load, export)
must be called on every rank together; generation and engine sleep/wake are per rank.

Public names (stable for the other distributed modules): ``WorkerSpec``, ``ModelWorker`` (``build``,
``join_process_group`` and the methods below), ``CallResult``.
"""

from __future__ import annotations

import os
import resource
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from reasoning_rl import dist
from reasoning_rl.algorithms import AggMode, LossConfig
from reasoning_rl.checkpoint import ADAPTER_DIR, CRITIC_DIR, POLICY_DIR, save_model_files
from reasoning_rl.distributed.live_engine import LiveCalls, LiveEngine
from reasoning_rl.distributed.rank import EngineRank
from reasoning_rl.factory import Models, build_models, engine_for
from reasoning_rl.handoff import HandoffStats
from reasoning_rl.policy.batch import TokenBatch
from reasoning_rl.rollout import ContinuousEngine, RolloutEngine
from reasoning_rl.rollout.base import ClosableEngine
from reasoning_rl.trace import Progress


@dataclass(frozen=True)
class WorkerSpec:
    """What a rank needs to build its models, decided by the driver (device and dtype resolved there, the
    engine sized for the run's prompts, the freshness probe's prompts picked)."""

    cfg: Any  # reasoning_rl.config.Config (pickled to Ray workers as it is)
    model_dir: Path
    device: str
    dtype: str
    max_model_len: int
    probe_prompts: tuple[tuple[int, ...], ...] = ()
    engine: bool = True  # False: training ranks with no rollout engine (``rrl sft``)


@dataclass(frozen=True)
class CallResult:
    """A remote call's value with its cost: seconds on the worker and the pickled size of the value (what came
    back to the driver)."""

    value: Any
    seconds: float
    nbytes: int


def join_process_group(rank: int, world: int, master_addr: str, master_port: int, timeout_s: float) -> None:
    """Join the run's ``torch.distributed`` group as ``rank`` (NCCL on CUDA, gloo on CPU). Ray gives every
    actor only its own GPU, so the local rank is 0."""
    os.environ.update(
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK="0",
    )
    dist.init(timeout_s=timeout_s)


def _ray_on() -> bool:
    try:
        import ray
    except ImportError:
        return False
    return bool(ray.is_initialized())


def node_address() -> str:
    """This node's address as other nodes reach it (Ray's view when Ray runs, else the host name's)."""
    if _ray_on():
        import ray

        return str(ray.util.get_node_ip_address())
    return socket.gethostbyname(socket.gethostname())


class ModelWorker(LiveCalls, EngineRank):
    """One rank's models and engine. Build with ``ModelWorker.build(spec)`` (or from parts, in tests). Its
    public methods are what the driver may ask of a training rank (``WorkerGroup.call``)."""

    def __init__(
        self,
        models: Models,
        engine: RolloutEngine | None,
        *,
        gate: Any = None,
        tokenizer: Any = None,
        rank: int = 0,
        handoff: Any = None,
        handoff_dtype: torch.dtype | None = None,
    ) -> None:
        self.models = models
        self.handoff_dtype = handoff_dtype  # the engines' dtype: weights go out in it
        self.engine = engine
        # the driver's RemoteEngine steps it (never on its own: the update needs the device between steps)
        self.live_engine = LiveEngine(engine, overlap=False) if isinstance(engine, ContinuousEngine) else None
        self.gate = gate  # FreshnessGate: proves every hand-off (rollout.freshness_check)
        self.tokenizer = tokenizer  # rank 0: checkpoints carry the tokenizer files
        self.rank = rank
        self.handoff = handoff  # split placement, rank 0: its HandoffGroup to the rollout ranks

    @classmethod
    def build(cls, spec: WorkerSpec, *, rank: int = 0, handoff: Any = None) -> ModelWorker:
        """Policy (+ reference, + critic) and the engine with the run's builders. The value head's random
        init is drawn from a generator seeded with ``run.seed`` (and the caller's RNG left as it was), so every
        rank, at any world size, starts from the same critic."""
        from reasoning_rl.freshness import FreshnessGate
        from reasoning_rl.policy.model import load_tokenizer, resolve_dtype

        cfg = spec.cfg
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.run.seed)
            models = build_models(cfg, spec.model_dir, spec.device, spec.dtype, spec.max_model_len)
        split = cfg.resources.placement == "split"  # the engines live on the rollout ranks
        engine = (
            None
            if split or not spec.engine
            else engine_for(cfg, spec.model_dir, spec.device, spec.max_model_len, dtype=spec.dtype)
        )
        gate = (
            FreshnessGate.for_run(
                engine, [list(p) for p in spec.probe_prompts], cfg.rollout.freshness_probe_tol
            )
            if cfg.rollout.freshness_check and spec.engine
            else None
        )
        tokenizer = load_tokenizer(str(spec.model_dir)) if rank == 0 else None
        dtype = resolve_dtype(spec.dtype)
        return cls(
            models, engine, gate=gate, tokenizer=tokenizer, rank=rank, handoff=handoff, handoff_dtype=dtype
        )

    # ---------------------------------------------------------------------------------- generation
    def engine_sleep(self, keep_weights: bool) -> None:
        self._engine().sleep(keep_weights=keep_weights)

    def engine_wake(self) -> None:
        self._engine().wake()

    def engine_asleep(self) -> bool:
        return bool(self._engine().asleep)

    def engine_version(self) -> int:
        return self._engine().version

    def engine_sleep_enabled(self) -> bool:
        return bool(getattr(self._engine(), "sleep_enabled", False))

    def close(self) -> None:
        """The run is over: end what the engine holds (``ClosableEngine``: an engine process, adapter files)."""
        if isinstance(self.engine, ClosableEngine):
            self.engine.close()

    def push_weights(self, version: int, bucket_bytes: int) -> HandoffStats:
        """Wake this rank's engine and stream the policy's weights (policy ``version``) into it (collective):
        ``HandoffStats``."""
        from reasoning_rl.handoff import push_weights

        engine = self._engine()
        engine.wake()
        return push_weights(
            self.models.policy,
            engine,
            version=version,
            bucket_bytes=bucket_bytes,
            gate=self.gate,
            dtype=self.handoff_dtype,
        )

    def send_weights(self, bucket_bytes: int) -> HandoffStats:
        """Split placement (collective over the training ranks, with the rollout ranks' ``receive_weights``):
        broadcast the policy's full weights to the rollout ranks; ``HandoffStats``."""
        from reasoning_rl.distributed.broadcast import send_weights

        return send_weights(
            self.models.policy,
            self.handoff,
            bucket_bytes=bucket_bytes,
            gate=self.gate,
            dtype=self.handoff_dtype,
        )

    def comm_bytes(self) -> dict[str, int]:
        """This rank's FSDP2 all-gather / reduce-scatter bytes of every model since the previous call."""
        total: dict[str, int] = {}
        for model in (self.models.policy, self.models.ref, self.models.critic):
            meter = model.comm if model is not None else None  # None: not sharded, nothing counted
            for kind, n in (meter.take() if meter is not None else {}).items():
                total[kind] = total.get(kind, 0) + n
        return total

    # ------------------------------------------------------------------------------------- scoring
    def policy_logprobs(self, batch: TokenBatch, with_entropy: bool) -> tuple[Tensor, Tensor | None]:
        out: tuple[Tensor, Tensor | None] = self.models.policy.logprobs(batch, with_entropy=with_entropy)
        return out

    def ref_logprobs(self, batch: TokenBatch) -> Tensor:
        out: Tensor = self._need("ref").logprobs(batch)
        return out

    def critic_values(self, batch: TokenBatch) -> Tensor:
        out: Tensor = self._need("critic").values(batch)
        return out

    # ------------------------------------------------------------------------------------ training
    def policy_train_step(
        self,
        batch: TokenBatch,
        advantages: Tensor,
        old_logprobs: Tensor | None,
        ref_logprobs: Tensor | None,
        cfg: LossConfig,
        *,
        max_response_len: int | None = None,
        token_weights: Tensor | None = None,
        progress: Progress | None = None,
    ) -> dict[str, float]:
        """``Policy.train_step`` on this rank's rows (collective), with its signature."""
        out: dict[str, float] = self.models.policy.train_step(
            batch,
            advantages,
            old_logprobs,
            ref_logprobs,
            cfg,
            max_response_len=max_response_len,
            token_weights=token_weights,
            progress=progress,
        )
        return out

    def sft_train_step(self, batch: TokenBatch, normalizer: float) -> dict[str, float]:
        """One supervised step (masked cross-entropy) on this rank's rows (collective): ``policy.sft``."""
        from reasoning_rl.policy.sft import sft_step

        return sft_step(self.models.policy, batch, normalizer)

    def sft_eval(self, batch: TokenBatch) -> dict[str, float]:
        """Summed eval NLL, correct greedy tokens and loss tokens over all ranks' rows (collective)."""
        from reasoning_rl.policy.sft import sft_eval

        return sft_eval(self.models.policy, batch)

    def critic_train_step(
        self,
        batch: TokenBatch,
        returns: Tensor,
        old_values: Tensor,
        *,
        agg: AggMode = "token-mean",
        progress: Progress | None = None,
    ) -> dict[str, float]:
        """``Critic.train_step`` on this rank's rows (collective), with its signature."""
        out: dict[str, float] = self._need("critic").train_step(
            batch, returns, old_values, agg=agg, progress=progress
        )
        return out

    def lr(self) -> float:
        return float(self.models.policy.optimizer.param_groups[0]["lr"])

    # ---------------------------------------------------------------------------- checkpoint / export
    def save_checkpoint(self, directory: Path) -> None:
        """Policy (model, optimizer, scheduler, step) and the critic's as sharded ``policy/`` (``critic/``)
        directories, each rank writing its own shards (collective), plus the model's config + tokenizer files
        from rank 0 (self-contained: exportable anywhere). Several nodes: ``directory`` must be shared."""
        self.models.policy.save_sharded(directory / POLICY_DIR)
        if self.models.critic is not None:
            self.models.critic.save_sharded(directory / CRITIC_DIR)
        if self.tokenizer is not None:
            save_model_files(directory, self.models.policy.lm, self.tokenizer)
            if self.models.policy.peft is not None:
                from reasoning_rl.policy.lora import write_adapter_config

                write_adapter_config(
                    directory / ADAPTER_DIR, self.models.policy.peft, self.models.policy.source[0]
                )
        dist.barrier()

    def load_checkpoint(self, directory: Path) -> None:
        """Restore ``save_checkpoint``'s shards (collective; DCP reshards to this run's world size)."""
        from reasoning_rl.config import ConfigError

        if self.models.policy.peft is not None:
            from reasoning_rl.policy.lora import check_base

            check_base(directory / ADAPTER_DIR, self.models.policy.source[0])
        self.models.policy.load_sharded(directory / POLICY_DIR)
        if self.models.critic is not None:
            if not (directory / CRITIC_DIR).is_dir():
                raise ConfigError(
                    f"{directory} has no {CRITIC_DIR}/: it was not saved by a PPO run, so it cannot "
                    "resume one (algorithm.name=ppo needs the critic's state)"
                )
            self.models.critic.load_sharded(directory / CRITIC_DIR)

    def export(self, out_dir: Path) -> None:
        """A plain HF model dir written by rank 0 (collective)."""
        self.models.policy.save_pretrained(out_dir)

    # ---------------------------------------------------------------------------------- inspection
    def model_shape(self, dtype: str) -> dict[str, Any]:
        model = getattr(self.models.policy, "lm", None)
        conf = getattr(model, "config", None)
        if model is None or conf is None:
            return {"dtype": dtype}
        policy = self.models.policy
        lora = policy.peft.peft_config["default"] if getattr(policy, "peft", None) is not None else None
        adapters = sum(p.numel() for p in policy.trainable_parameters()) if lora is not None else 0
        return {
            "params": sum(p.numel() for p in model.parameters()) - adapters,  # the base model's
            "trainable": sum(p.numel() for p in policy.trainable_parameters()),
            **({"lora_rank": int(lora.r)} if lora is not None else {}),
            "layers": getattr(conf, "num_hidden_layers", None),
            "hidden": getattr(conf, "hidden_size", None),
            "vocab": getattr(conf, "vocab_size", None),
            "dtype": dtype,
        }

    def stats(self) -> dict[str, Any]:
        """Where this rank runs and its memory high-water marks (host RSS; accelerator when present)."""
        out: dict[str, Any] = {
            "rank": self.rank,
            "node": node_address(),
            "pid": os.getpid(),
            "rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "time": time.time(),
        }
        if _ray_on():
            import ray

            out["node_id"] = ray.get_runtime_context().get_node_id()
        if torch.cuda.is_available():
            out["gpu_mem_peak_bytes"] = int(torch.cuda.max_memory_allocated())
        return out

    def _engine(self) -> RolloutEngine:
        if self.engine is None:
            raise RuntimeError(f"rank {self.rank} has no rollout engine")
        return self.engine

    def _need(self, which: str) -> Any:
        model = getattr(self.models, which)
        if model is None:
            raise RuntimeError(f"rank {self.rank} built no {which} model for this run")
        return model
