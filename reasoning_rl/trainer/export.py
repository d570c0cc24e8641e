"""``rrl export RUN_DIR``: turn a checkpoint into a plain HF model directory (on demand, any time)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch
import yaml

from reasoning_rl.trainer.checkpoint import CheckpointManager


def export_checkpoint(run_dir: str | Path, *, step: int | None = None, out: str | Path | None = None) -> Path:
    """Write checkpoint ``step`` (default: latest complete) of ``run_dir`` as safetensors + tokenizer."""
    from reasoning_rl.policy.model import load_causal_lm, load_tokenizer

    run = Path(run_dir)
    config_path = run / "config.yaml"
    if not config_path.is_file():
        raise FileNotFoundError(f"{run} is not a run directory (no config.yaml)")
    mgr = CheckpointManager(run / "checkpoints")
    found = {c.step: c for c in mgr.list()}
    if not found:
        raise FileNotFoundError(f"{run} has no complete checkpoint to export")
    if step is not None and step not in found:
        raise FileNotFoundError(f"no complete checkpoint for step {step} in {run}; have: {sorted(found)}")
    info = found[step if step is not None else max(found)]
    cfg = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    model_path = str(cfg["model"]["path"])
    state = torch.load(info.path / "policy.pt", weights_only=False, map_location="cpu")["model"]
    # the policy checkpoints its scoring wrapper, whose HF model sits under "lm."
    state = {k.removeprefix("lm."): v for k, v in state.items()}
    model = load_causal_lm(model_path, dtype="float32")
    model.load_state_dict(state)
    target = Path(out) if out is not None else run / "export" / f"step_{info.step}"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        load_tokenizer(model_path).save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
