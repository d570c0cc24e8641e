"""FSDP2 switches under torchrun (2 gloo ranks): per setting, one scoring pass + one train step of the policy,
with torch.distributed's all-gather / reduce-scatter calls wrapped to count the bytes they really move; the
frozen reference with and without CPU offload; the policy with gradient checkpointing. Rank 0 writes the records to OUT (``torch.save``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as tdist

from reasoning_rl import dist
from reasoning_rl.algorithms import LossConfig, compute_advantages
from reasoning_rl.policy import Policy, ReferencePolicy
from reasoning_rl.policy.comm import Sharding

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fsdp_worker import fixed_batch  # noqa: E402

MEASURED = {"all_gather": 0, "reduce_scatter": 0}
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "bf16_reduce": {"sharding": Sharding(reduce_dtype=torch.bfloat16)},
    "no_reshard": {"sharding": Sharding(reshard_after_forward=False)},
    "prefetch": {"sharding": Sharding(forward_prefetch=1)},
    "cpu_offload": {"sharding": Sharding(cpu_offload=True)},
    "grad_ckpt": {"activation_checkpointing": True},
}


def count(name: str, kind: str, pos: int, key: str) -> None:
    """Wrap ``torch.distributed.<name>`` (what FSDP2 calls) to add its full buffer's bytes to MEASURED."""
    original = getattr(tdist, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        t = args[pos] if len(args) > pos else kwargs[key]
        MEASURED[kind] += t.numel() * t.element_size()
        return original(*args, **kwargs)

    setattr(tdist, name, counted)


def shard() -> Any:
    batch, rewards = fixed_batch()
    adv = compute_advantages("grpo", rewards, torch.arange(len(batch)) // 4)
    rows = list(range(dist.rank(), len(batch), dist.world_size()))
    return batch.select(rows), adv[rows]


def measured() -> dict[str, int]:
    out = dict(MEASURED)
    MEASURED.update(all_gather=0, reduce_scatter=0)
    return out


def policy_step(model_dir: str, options: dict[str, Any]) -> dict[str, Any]:
    """Two steps (scoring + update each), each step's measured and computed bytes."""
    policy = Policy.from_pretrained(model_dir, lr=1e-3, micro_batch_tokens=20, **options)
    batch, adv = shard()
    measured()
    assert policy.comm is not None  # sharded: its meter counts each collective's bytes
    out: dict[str, Any] = {"measured": [], "computed": []}
    for _ in range(2):
        old, _ = policy.logprobs(batch)
        metrics = policy.train_step(batch, adv, old - 0.2 * batch.response_mask, None, LossConfig())
        out["measured"].append(measured())
        out["computed"].append(policy.comm.take())
    out["metrics"] = metrics
    out["device"] = str(next(policy.module.parameters()).device)
    out["params"] = {n: t.clone() for bucket in policy.iter_full_params() for n, t in bucket}
    return out


def reference(model_dir: str, offload: bool) -> dict[str, Any]:
    ref = ReferencePolicy.from_pretrained(model_dir, offload=offload, micro_batch_tokens=20)
    batch, _ = shard()
    measured()
    assert ref.comm is not None
    out: dict[str, Any] = {"measured": [], "computed": []}
    for _ in range(2):
        out["logprobs"] = ref.logprobs(batch)
        out["measured"].append(measured())
        out["computed"].append(ref.comm.take())
    out["offload"] = type(ref.module._get_fsdp_state()._fsdp_param_group.offload_policy).__name__  # type: ignore[operator, union-attr]
    return out


if __name__ == "__main__":
    model_dir, out_path = sys.argv[1], Path(sys.argv[2])
    dist.init()
    # FSDP2's collectives: torch 2.13 calls the *_single names; torch 2.11 (vLLM 0.24's torch, issue 42) the older
    # ones, with the same output / input arguments. Only one of each pair is wrapped, so no byte counts twice.
    gather = "all_gather_single" if hasattr(tdist, "all_gather_single") else "all_gather_into_tensor"
    scatter = "reduce_scatter_single" if hasattr(tdist, "reduce_scatter_single") else "reduce_scatter_tensor"
    count(gather, "all_gather", 0, "output_tensor")
    count(scatter, "reduce_scatter", 1, "input")
    result: dict[str, Any] = {name: policy_step(model_dir, s) for name, s in SETTINGS.items()}
    result["ref"] = {offload: reference(model_dir, offload) for offload in (False, True)}
    if dist.is_main():
        torch.save(result, out_path)
    dist.destroy()
