"""Sharded checkpoints of a trainable module (weights + optimizer + LR schedule) with torch.distributed.checkpoint.

Every rank writes only its own FSDP2 shards (DCP: one data file per rank, ``.metadata`` from the coordinator)
into one directory, so no rank ever holds the full model or optimizer. DCP records each tensor's global shape:
loading reshards to whatever world size the loading run has (2 -> 1, 1 -> 2, ...). Without a process group
(the in-process single-rank path) DCP writes the same format from one process.

Atomicity is the checkpoint manager's: write into its temporary directory, whose rename is the commit point;
a crash mid-save leaves only a ``.tmp-*`` dir. On several nodes the directory must be on a filesystem that
every rank sees (each writes its own file there).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from reasoning_rl import dist

METADATA = ".metadata"  # DCP's index, written last by the coordinator rank


def is_sharded(directory: Path) -> bool:
    return (directory / METADATA).is_file()


def _single() -> bool:
    """No process group: the in-process single-rank path (DCP then runs without collectives)."""
    return not dist.is_initialized()


@contextmanager
def _quiet(single: bool) -> Iterator[None]:
    """DCP warns on every call without a process group that it assumes one process: here that is the plan."""
    with warnings.catch_warnings():
        if single:
            warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninit")
        yield


def _require(directory: Path, what: str) -> None:
    """A clear error for a missing checkpoint or the single-file format of older versions."""
    if is_sharded(directory):
        return
    legacy = directory.with_suffix(".pt")
    if legacy.is_file():
        raise FileNotFoundError(
            f"{legacy} is a single-file {what} checkpoint of an older version, which this version does not load "
            f"(checkpoints are now sharded directories, {directory.name}/{METADATA}); resume from a checkpoint "
            "written by this version, or start a new run"
        )
    raise FileNotFoundError(f"no sharded {what} checkpoint at {directory} (no {METADATA})")


def _options(trainable_only: bool) -> Any:
    """``trainable_only``: leave frozen parameters out (a LoRA policy: its base is the base model's files, the
    checkpoint holds the adapters and their optimizer state); loading then fills only those (``strict`` off)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=trainable_only, strict=not trainable_only)


def _state(
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    extra: dict[str, Any],
    trainable_only: bool = False,
) -> dict[str, Any]:
    """The DCP state: this rank's shards (DTensors under FSDP2, plain tensors otherwise) + small objects."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(module, optimizer, options=_options(trainable_only))
    if trainable_only:  # also a tied frozen weight's second name (lm_head.weight), which DCP keeps
        trained = {n for n, p in module.named_parameters(remove_duplicate=False) if p.requires_grad}
        model_sd = {k: v for k, v in model_sd.items() if k in trained}
    return {"model": model_sd, "optimizer": optim_sd, "scheduler": scheduler.state_dict(), **extra}


def save_train_state(
    directory: Path,
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    extra: dict[str, Any],
    *,
    trainable_only: bool = False,
) -> None:
    """Write ``module``/``optimizer``/``scheduler`` (+ ``extra`` picklable values) to ``directory``
    (``trainable_only``: without the frozen parameters). Collective."""
    import torch.distributed.checkpoint as dcp

    directory.mkdir(parents=True, exist_ok=True)
    single = _single()
    state = _state(module, optimizer, scheduler, extra, trainable_only)
    with _quiet(single):
        dcp.save(state, checkpoint_id=str(directory), no_dist=single)


def load_train_state(
    directory: Path,
    module: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    extra: dict[str, Any],
    *,
    what: str,
    trainable_only: bool = False,
) -> dict[str, Any]:
    """Restore what ``save_train_state`` wrote, resharded to this run's world size; returns ``extra``'s keys
    with their saved values (``extra`` gives the keys and current values as templates). Collective."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    _require(directory, what)
    state = _state(module, optimizer, scheduler, extra, trainable_only)
    single = _single()
    with _quiet(single):
        dcp.load(state, checkpoint_id=str(directory), no_dist=single)
    set_state_dict(
        module,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
        options=_options(trainable_only),
    )
    scheduler.load_state_dict(state["scheduler"])
    return {k: state[k] for k in extra}


def read_model_state(directory: Path, *, what: str = "policy") -> dict[str, Tensor]:
    """The full (unsharded) model tensors of a sharded checkpoint on CPU, keyed as the wrapped module names
    them (the policy's HF model sits under ``lm.``). Needs no process group: for export and inspection."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    _require(directory, what)
    meta = dcp.FileSystemReader(str(directory)).read_metadata()
    model: dict[str, Tensor] = {}
    for key, item in meta.state_dict_metadata.items():
        if key.startswith("model.") and isinstance(item, TensorStorageMetadata):
            model[key.removeprefix("model.")] = torch.empty(item.size, dtype=item.properties.dtype)
    with _quiet(True):
        dcp.load({"model": model}, checkpoint_id=str(directory), no_dist=True)
    return model
