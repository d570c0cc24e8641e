"""Weights into a vLLM engine core that runs in a process of its own (``rollout.engine_process``).

Each hand-off bucket travels as one flat byte buffer that both processes map: a CUDA IPC handle on the GPU (the
worker reads the trainer's device memory, no host round trip), a shared-memory file on CPU (so CI runs the same
path). The worker copies out of it with the model's own loader and synchronises its device before it returns;
only then does the trainer free the buffer. On one H100 at the anchor's shape the engine-core process decoded 1.04x
as fast as the in-process core, and the anchor ran 1.045x (``bench/gpu/results/issue42j_*``).
"""

from __future__ import annotations

import math
import os
import pickle
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import torch

from reasoning_rl.rollout.buckets import buckets
from reasoning_rl.rollout.vllm_model import load_in_place, refresh_tied_head

R = TypeVar("R")
T = TypeVar("T")
ALIGN = 64  # every tensor starts at a multiple of this many bytes in its bucket (any dtype's view is legal)


@dataclass(frozen=True)
class Slot:
    """Where one named tensor lies in a bucket's flat buffer."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int


@dataclass(frozen=True)
class Bucket:
    """One bucket as the worker receives it: the tensors' places, and the buffer's handle (``cuda``: torch's
    rebuild function and its arguments, ``torch.multiprocessing.reductions.reduce_tensor``; else ``path``: the
    shared-memory file)."""

    slots: tuple[Slot, ...]
    nbytes: int
    cuda: tuple[Any, tuple[Any, ...]] | None = None
    path: str | None = None


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class Packed:
    """A bucket's tensors copied into one flat buffer the worker can map; ``close`` frees it (after the worker
    returned)."""

    def __init__(self, group: list[tuple[str, torch.Tensor]]) -> None:
        slots, offset = [], 0
        for name, t in group:
            slots.append(Slot(name, t.dtype, tuple(t.shape), offset))
            offset += _aligned(_nbytes(t))
        device = group[0][1].device
        self._path: str | None = None
        if device.type == "cuda":
            self.buffer = _device_buffer(offset, device)
        else:
            fd, self._path = tempfile.mkstemp(prefix="rrl-handoff-", dir=_shm_dir())
            os.close(fd)
            self.buffer = torch.from_file(self._path, shared=True, size=offset, dtype=torch.uint8)
        for (_, t), slot in zip(group, slots, strict=True):
            view(self.buffer, slot).copy_(t.detach())
        if device.type == "cuda":
            from torch.multiprocessing.reductions import reduce_tensor

            torch.cuda.current_stream(device).synchronize()  # the copies are done before the worker reads
            self.bucket = Bucket(tuple(slots), offset, cuda=reduce_tensor(self.buffer))
        else:
            self.bucket = Bucket(tuple(slots), offset, path=self._path)

    def close(self) -> None:
        del self.buffer
        if self._path is not None:
            Path(self._path).unlink(missing_ok=True)


def _device_buffer(nbytes: int, device: torch.device) -> torch.Tensor:
    """A device buffer another process can open by CUDA IPC: from a plain segment even where the allocator
    uses expandable segments (``PYTORCH_CUDA_ALLOC_CONF``), whose IPC export needs ``pidfd_getfd``, which
    containers often forbid; vLLM's sleep-mode pool switches the setting the same way."""
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + "," + os.environ.get("PYTORCH_ALLOC_CONF", "")
    expandable = "expandable_segments:True" in conf
    if expandable:
        torch.cuda.memory._set_allocator_settings("expandable_segments:False")
    try:
        return torch.empty(nbytes, dtype=torch.uint8, device=device)
    finally:
        if expandable:
            torch.cuda.memory._set_allocator_settings("expandable_segments:True")


def _shm_dir() -> str | None:
    """RAM-backed /dev/shm where there is one (Linux), else the temporary directory."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else None


def view(buffer: torch.Tensor, slot: Slot) -> torch.Tensor:
    """``slot``'s tensor in a flat uint8 ``buffer`` (no copy)."""
    size = math.prod(slot.shape) * torch.empty((), dtype=slot.dtype).element_size()
    return buffer[slot.offset : slot.offset + size].view(slot.dtype).view(slot.shape)


def unpack(bucket: Bucket) -> tuple[torch.Tensor, list[tuple[str, torch.Tensor]]]:
    """In the worker: the buffer mapped (kept alive by the caller while the views are used) and its tensors."""
    if bucket.cuda is not None:
        rebuild, args = bucket.cuda
        buffer = rebuild(*args)
    elif bucket.path is not None:
        buffer = torch.from_file(bucket.path, shared=True, size=bucket.nbytes, dtype=torch.uint8)
    else:
        raise ValueError("a hand-off bucket without a buffer handle")
    return buffer, [(s.name, view(buffer, s)) for s in bucket.slots]


def load_bucket(worker: Any, payload: bytes, in_place: bool) -> int:
    """``collective_rpc`` target, in vLLM's worker: the pickled ``Bucket``'s tensors into the served model
    (``in_place``: copied straight into vLLM's tensors, ``load_in_place``; else vLLM's layer-wise reload, then the
    tied head re-tied), the device synchronised so the trainer may free the buffer. Returns the tensor count.
    (Pickled by us: vLLM's own encoder would send a dataclass as a plain dict.)"""
    bucket = pickle.loads(payload)
    if not isinstance(bucket, Bucket):
        raise TypeError(f"load_bucket got {type(bucket).__name__}, not a Bucket")
    buffer, weights = unpack(bucket)
    model = worker.get_model()
    if in_place:
        load_in_place(model, weights)
    else:
        worker.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
        refresh_tied_head(worker.get_model())
    if buffer.is_cuda:
        torch.cuda.synchronize(buffer.device)
    del weights, buffer
    return len(bucket.slots)


def _pickled(worker: Any, fn: Callable[[torch.nn.Module], Any]) -> bytes:
    """``collective_rpc`` target: ``fn`` on the served model, its result pickled by us (vLLM's encoder would
    turn a dataclass in it into a plain dict)."""
    return pickle.dumps(fn(worker.get_model()))


def apply_model(llm: Any, fn: Callable[[torch.nn.Module], R]) -> list[R]:
    """``LLM.apply_model`` for an engine core in another process: each worker's result as ``fn`` returned it."""
    return [pickle.loads(b) for b in llm.collective_rpc(_pickled, args=(fn,))]


def each(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``fn`` on every item at once, one thread each (the calls block on an engine process's socket, so N engine
    cores answer in about the time of one), results in order; the first failure is raised once all are done.
    One item (or none): called here, no thread."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(len(items)) as pool:
        return list(pool.map(fn, items))


def _load(llm: Any, args: tuple[bytes, bool]) -> Any:
    return llm.collective_rpc(load_bucket, args=args)


def ship(
    llms: Sequence[Any], named: Iterable[tuple[str, torch.Tensor]], *, in_place: bool, bucket_bytes: int
) -> None:
    """Every tensor of ``named`` into the workers of each of ``llms`` (engine cores holding the same model), one
    bucket per engine call: each bucket packed once and loaded by every core at once (``each``) before it is
    freed. vLLM's layer-wise reload (``in_place`` False: the CPU backend's pre-packed layers) must see a layer's
    tensors in one call, so it gets one bucket of everything."""
    for group in buckets(named, bucket_bytes if in_place else None):
        packed = Packed(group)
        try:
            each(partial(_load, args=(pickle.dumps(packed.bucket), in_place)), llms)
        finally:
            packed.close()
    if torch.cuda.is_available():
        torch.cuda.ipc_collect()  # the buffers the workers have let go of, back to this process's allocator
