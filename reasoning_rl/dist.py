"""Process-group helpers: one place that knows whether we run under torchrun, and on what backend."""

from __future__ import annotations

import gc
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    return dist.get_world_size() if is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return dist.get_rank() if is_initialized() else int(os.environ.get("RANK", "0"))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main() -> bool:
    return rank() == 0


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def init(backend: str | None = None, timeout_s: float = 1800.0) -> None:
    """Initialise the default process group from torchrun's env (idempotent).

    Without torchrun (no MASTER_ADDR) a single-process group is created on a free local port so FSDP2
    can run with world size 1 (e.g. one GPU).
    """
    if is_initialized():
        return
    if "MASTER_ADDR" not in os.environ:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", WORLD_SIZE="1")
    device_id = None
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank())
        device_id = torch.device("cuda", local_rank())
    dist.init_process_group(
        backend or default_backend(), timeout=timedelta(seconds=timeout_s), device_id=device_id
    )


def barrier() -> None:
    if is_initialized():
        dist.barrier()


def _all_reduce(x: torch.Tensor, op: dist.ReduceOp.RedOpType) -> torch.Tensor:
    """In-place all-reduce of a (usually CPU) tensor on whatever device the backend needs (NCCL: GPU)."""
    if not is_initialized() or dist.get_world_size() == 1:
        return x
    if dist.get_backend() == "nccl" and x.device.type != "cuda":
        y = x.to(torch.device("cuda", torch.cuda.current_device()))
        dist.all_reduce(y, op=op)
        x.copy_(y.cpu())
        return x
    dist.all_reduce(x, op=op)
    return x


def all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    """In-place sum across ranks (identity in a single process)."""
    return _all_reduce(x, dist.ReduceOp.SUM)


def all_reduce_max(x: torch.Tensor) -> torch.Tensor:
    """In-place max across ranks (identity in a single process)."""
    return _all_reduce(x, dist.ReduceOp.MAX)


def destroy() -> None:
    """Tear the process group down while the interpreter is whole: objects in reference cycles (an FSDP2
    module's state holds its device mesh, which holds the gloo group) are collected first, so the group's worker
    threads are joined now. Left to interpreter finalization, their destruction aborted the process after a
    clean run ("terminate called without an active exception": 5 of 90 two-rank gloo runs, 0 of 60 with this)."""
    if is_initialized():
        gc.collect()
        dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
