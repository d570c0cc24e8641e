"""Split placement's weight hand-off: training rank 0 broadcasts the full weights, bucket by bucket, to every
rollout rank over a gloo group of its own (training rank 0 + the rollout ranks).

The group is separate from the training ranks' default ``torch.distributed`` group on purpose: FSDP2's mesh and
the loss all-reduces span the default group, which must hold only ranks with a policy shard. Every training rank
walks ``Policy.iter_full_params`` (each bucket an all-gather); rank 0 sends each bucket's names, shapes and dtypes
(pickled) and then the tensors; rollout ranks feed them lazily into their engine (one bucket alive at a time) and,
with the freshness gate on, prove the engine holds them against the trainer's probe log-probs sent last.

A LoRA policy (``model.lora``) sends its adapters only (PEFT keys, and PEFT's adapter config first): the rollout
engines serve the base model they loaded at start with the live adapter (``AdapterEngine.load_adapter``: vLLM's
LoRA support), so a hand-off moves the adapters' bytes, not the model's.

Public names (stable): ``HandoffGroup``, ``send_weights``, ``receive_weights``.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as tdist
from torch import Tensor

from reasoning_rl.freshness import CheckResult, FreshnessGate, WeightSyncError
from reasoning_rl.handoff import HandoffStats, Tally, load_all
from reasoning_rl.policy.lora import adapter_config_dict
from reasoning_rl.rollout.adapters import AdapterEngine, peft_state_name
from reasoning_rl.rollout.fingerprints import EngineWeights, SentFingerprints, compare_fingerprints

if TYPE_CHECKING:
    from reasoning_rl.policy.policy import Policy
    from reasoning_rl.rollout.base import RolloutEngine

Loaded = tuple[float, CheckResult | None]  # a swap's load seconds and gate result
# runs the load + gate between two decode steps (LiveEngine.swap)
Swap = Callable[[Callable[[], Loaded]], Loaded]

_DTYPES = {str(d): d for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64)}


class HandoffGroup:
    """A gloo group of ``size`` members (member 0: training rank 0, the sender) on its own TCP store, so it
    needs no default process group (rollout ranks have none)."""

    def __init__(self, member: int, size: int, master: tuple[str, int], timeout_s: float) -> None:
        timeout = timedelta(seconds=timeout_s)
        store = tdist.TCPStore(master[0], master[1], size, is_master=member == 0, timeout=timeout)
        pg = tdist.ProcessGroupGloo(tdist.PrefixStore("handoff", store), member, size, timeout)
        self.pg: Any = pg  # Any: torch's stubs lack the backend's collectives (broadcast)
        self.member = member

    def broadcast(self, tensor: Tensor) -> Tensor:
        """``tensor`` from member 0 to all, in place (a CPU tensor: gloo)."""
        opts = tdist.BroadcastOptions()
        opts.rootRank = 0
        opts.rootTensor = 0
        self.pg.broadcast([tensor], opts).wait()
        return tensor

    def broadcast_object(self, obj: Any) -> Any:
        """A picklable object from member 0 (others pass None): length, then bytes."""
        data = pickle.dumps(obj) if self.member == 0 else b""
        size = self.broadcast(torch.tensor([len(data)], dtype=torch.int64))
        buf = torch.frombuffer(bytearray(data), dtype=torch.uint8) if self.member == 0 else None
        if buf is None:
            buf = torch.empty(int(size[0]), dtype=torch.uint8)
        self.broadcast(buf)
        return pickle.loads(buf.numpy().tobytes()) if self.member != 0 else obj


def send_weights(
    policy: Policy,
    group: HandoffGroup | None,
    *,
    bucket_bytes: int,
    gate: FreshnessGate | None,
    dtype: torch.dtype | None = None,
) -> HandoffStats:
    """Training side (collective over the training ranks): rank 0 (``group`` set) broadcasts every bucket (in
    the engines' ``dtype`` when given), the others only join the all-gathers. With a ``gate``, the trainer's
    probe log-probs follow the weights."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1; got {bucket_bytes}")
    start = time.perf_counter()
    nbytes = tensors = 0
    sent = SentFingerprints() if group is not None and gate is not None else None
    adapter = adapter_config_dict(policy.peft) if policy.peft is not None else None
    if group is not None:
        group.broadcast_object({"adapter_config": adapter})  # the header: full weights, or which adapter
    for bucket in _buckets(policy, bucket_bytes, dtype):
        if group is not None:
            group.broadcast_object([(n, tuple(t.shape), str(t.dtype)) for n, t in bucket])
            for name, t in bucket:
                if sent is not None:
                    sent.observe(name, t)
                group.broadcast(t.detach().cpu().contiguous())
        nbytes += sum(t.numel() * t.element_size() for _, t in bucket)
        tensors += len(bucket)
    if group is not None:
        group.broadcast_object(None)  # end of the weights
    trainer_lp = policy.logprobs(gate.probe.batch())[0] if gate is not None else None  # collective
    if group is not None and sent is not None:
        group.broadcast_object((trainer_lp, sent.result()))
    return HandoffStats(bytes=nbytes, seconds=time.perf_counter() - start, tensors=tensors)


def _buckets(
    policy: Policy, bucket_bytes: int, dtype: torch.dtype | None
) -> Iterator[list[tuple[str, Tensor]]]:
    """What a split hand-off sends: the full weights (in the engines' ``dtype``), or a LoRA policy's adapters
    under PEFT's keys (as trained: vLLM's LoRA loader casts them)."""
    if policy.peft is None:
        yield from policy.iter_full_params(bucket_bytes, dtype)
        return
    for bucket in policy.iter_adapter_params(bucket_bytes):
        yield [(peft_state_name(name), tensor) for name, tensor in bucket]


def receive_weights(
    engine: RolloutEngine,
    group: HandoffGroup,
    *,
    version: int,
    gate: FreshnessGate | None,
    swap: Swap | None = None,
) -> HandoffStats:
    """Rollout side: load what ``send_weights`` broadcasts into ``engine``; with a ``gate``, verify it
    (``WeightSyncError`` naming the tensor or the probe gap). The check is against what the TRAINER sent: what
    arrived is fingerprinted as received (exactly, in the sent dtype) and compared with the trainer's own
    fingerprints, and the engine against what arrived, so a tensor changed in transit fails too. LoRA adapters
    go to ``engine.load_adapter`` and are compared with the engine's ``adapter_fingerprints()``. ``version``: the
    policy version they are, which the engine records.

    ``swap`` (a live engine that keeps decoding, ``LiveEngine.swap``): every bucket is received first, while
    the engine decodes, and the load plus the gate then run inside ``swap``, between two decode steps."""
    adapter = group.broadcast_object(None)["adapter_config"]
    if adapter is not None and not isinstance(engine, AdapterEngine):
        raise WeightSyncError(f"{type(engine).__name__} cannot serve LoRA adapters (no load_adapter)")
    tally = Tally(gate, exact=adapter is not None)
    arrived = SentFingerprints() if gate is not None else None

    def received() -> Iterator[tuple[str, Tensor]]:
        while (meta := group.broadcast_object(None)) is not None:
            for name, shape, dtype in meta:
                tensor = group.broadcast(torch.empty(shape, dtype=_DTYPES[dtype]))
                if arrived is not None:
                    arrived.observe(name, tensor)
                yield name, tensor

    start = time.perf_counter()
    engine.wake()
    stream = tally.count(received())
    if swap is not None:
        stream = iter(list(stream))  # every bucket off the wire while the engine keeps decoding

    def load() -> float:
        if adapter is not None:
            cast(AdapterEngine, engine).load_adapter(stream, adapter, version=version)
            for _ in stream:  # drained like load_all's: the sender must not be left mid-broadcast
                pass
        else:
            load_all(
                engine, stream, version=version
            )  # stopping early must not leave the sender mid-broadcast
        return time.perf_counter() - start

    def check(sent: Any) -> CheckResult | None:
        """The gate, given what the trainer sent after the weights: its probe log-probs and fingerprints."""
        if gate is None or tally.sent is None or arrived is None:
            return None
        trainer_lp, trainer_sent = sent
        transit = compare_fingerprints(trainer_sent, EngineWeights(arrived.result()))
        prior = None if transit is None else f"what arrived differs from what the trainer sent: {transit}"
        return gate.verify(
            trainer_lp, engine, tally.sent.result(), step=version, prior=prior, adapters=adapter is not None
        )

    def probe() -> Any:
        return group.broadcast_object(None) if gate is not None else None

    if swap is None:
        seconds = load()
        return tally.stats(seconds, check(probe()))
    sent = probe()
    seconds, result = swap(lambda: (load(), check(sent)))
    return tally.stats(seconds, result)
