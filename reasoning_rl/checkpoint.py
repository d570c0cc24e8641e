"""Atomic checkpoints (``reasoning_rl.atomic.atomic_dir``): a temporary dir, fsynced, then one ``rename``.

A crash (even SIGKILL) at any point leaves either the previous checkpoints untouched plus a stale
``.tmp-*`` dir (removed on the next start), or the new complete ``step_N``. ``latest()`` only ever
returns complete checkpoints: published names plus a ``COMPLETE`` marker written last inside the tmp dir.

Below both the trainer (``CheckpointManager`` saves, resumes, prunes) and the distributed workers (each rank
writes its shards under ``POLICY_DIR`` / ``CRITIC_DIR`` and rank 0 the ``MODEL_FILES``; a failure message
names the newest complete checkpoint), so the layout of ``step_N/`` is spelled in one place. A LoRA run's
``POLICY_DIR`` holds only the adapters and their optimizer state; ``ADAPTER_DIR`` says which base they belong to.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reasoning_rl.atomic import TMP_PREFIX, atomic_dir
from reasoning_rl.faults import fault_point

_STEP_DIR = re.compile(r"^step_(\d+)$")
MARKER = "COMPLETE"
STATE_FILE = "trainer_state.json"
RNG_FILE = "rng.pt"
POLICY_DIR = "policy"  # the models' sharded (torch.distributed.checkpoint) directories inside step_N/
CRITIC_DIR = "critic"
MODEL_FILES = "hf"  # inside a checkpoint: config.json, generation_config.json, tokenizer files
ADAPTER_DIR = "adapter"  # a LoRA run's checkpoint: PEFT's adapter_config.json + the base model's identity


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: Path


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class CheckpointManager:
    """Owns ``run_dir/checkpoints``: save (atomic), find the latest complete one, prune old ones."""

    def __init__(self, root: str | Path, *, keep: int = 2) -> None:
        self.root = Path(root)
        self.keep = keep
        self.root.mkdir(parents=True, exist_ok=True)

    def clean_stale(self) -> list[Path]:
        """Remove leftovers of interrupted saves (``.tmp-*`` dirs); returns what was removed."""
        stale = [p for p in self.root.iterdir() if p.name.startswith(TMP_PREFIX)]
        for p in stale:
            shutil.rmtree(p, ignore_errors=True)
        return stale

    def list(self) -> list[CheckpointInfo]:
        found = []
        for p in self.root.iterdir():
            m = _STEP_DIR.match(p.name)
            if m and (p / MARKER).exists():
                found.append(CheckpointInfo(int(m.group(1)), p))
        return sorted(found, key=lambda c: c.step)

    def latest(self) -> CheckpointInfo | None:
        found = self.list()
        return found[-1] if found else None

    def save(
        self,
        step: int,
        write_payload: Callable[[Path], None],
        trainer_state: dict[str, Any],
        rng: dict[str, Any] | None = None,
    ) -> Path:
        """``write_payload(tmp_dir)`` writes model/optimizer/scheduler; we add RNG (``rng``: as it was when the
        step finished; default: now) + trainer state + marker."""
        final = self.root / f"step_{step}"
        with atomic_dir(final) as tmp:
            write_payload(tmp)
            fault_point("checkpoint")  # a crash test's mid-checkpoint: state written, not complete
            torch.save(rng if rng is not None else rng_state(), tmp / RNG_FILE)
            (tmp / STATE_FILE).write_text(
                json.dumps({"step": step, **trainer_state}, indent=2, default=str), encoding="utf-8"
            )
            (tmp / MARKER).write_text(str(step), encoding="utf-8")
        self._prune()
        return final

    def _prune(self) -> None:
        for info in self.list()[: -self.keep]:
            shutil.rmtree(info.path, ignore_errors=True)

    @staticmethod
    def load_trainer_state(path: Path) -> dict[str, Any]:
        state: dict[str, Any] = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
        return state

    @staticmethod
    def load_rng(path: Path) -> None:
        set_rng_state(torch.load(path / RNG_FILE, weights_only=False))

    def resolve(self, resume: str) -> CheckpointInfo | None:
        """``resume`` setting -> checkpoint to load (None: start fresh). A named path must be complete."""
        if resume == "never":
            return None
        if resume == "auto":
            return self.latest()
        path = Path(resume)
        m = _STEP_DIR.match(path.name)
        if not (path / MARKER).exists() or m is None:
            raise FileNotFoundError(
                f"trainer.resume={resume!r} is not a complete checkpoint dir (step_N/{MARKER})"
            )
        return CheckpointInfo(int(m.group(1)), path)


def save_model_files(checkpoint_dir: Path, model: Any, tokenizer: Any) -> None:
    """What a checkpoint needs besides its weights to become an HF model again: config + tokenizer."""
    target = checkpoint_dir / MODEL_FILES
    model.config.save_pretrained(target)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(target)
    tokenizer.save_pretrained(target)
