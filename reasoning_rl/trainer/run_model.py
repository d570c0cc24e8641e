"""``rrl eval --model RUN_DIR [--step N]``: a run directory stands for one of its checkpoints as a model.

Checkpoints are self-contained (``step_N/hf/`` beside the weights), so the checkpoint is exported once to
``RUN_DIR/export/step_N`` (where the end-of-training export also goes; an existing complete one is reused) and
evaluated from there, from any working directory and after the run directory moved. A PEFT adapter directory
(``rrl export --adapter``, or any PEFT LoRA adapter of a local base model) stands for its base with the adapters
merged, written once to ``.cache/merged/`` (keyed by the adapter files' hash).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from reasoning_rl.checkpoint import CheckpointManager


def is_run_dir(path: str | Path) -> bool:
    p = Path(path)
    return (p / "config.yaml").is_file() and (p / "checkpoints").is_dir()


def model_from_run(run_dir: str | Path, step: int | None) -> Path:
    """The HF model dir of checkpoint ``step`` (default: latest complete) of ``run_dir``, exported if needed."""
    from reasoning_rl.trainer.export import export_checkpoint

    run = Path(run_dir)
    found = sorted(c.step for c in CheckpointManager(run / "checkpoints").list())
    if not found:
        raise FileNotFoundError(f"{run} has no complete checkpoint to evaluate")
    if step is not None and step not in found:
        raise FileNotFoundError(f"no complete checkpoint for step {step} in {run}; have: {found}")
    chosen = step if step is not None else found[-1]
    target = run / "export" / f"step_{chosen}"
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")):
        return target
    return export_checkpoint(run, step=chosen, out=target)


def model_from_adapter(adapter_dir: str | Path) -> Path:
    """The merged HF model dir of a PEFT adapter directory (merged once, then reused)."""
    from reasoning_rl.policy.lora import merge_adapter_dir
    from reasoning_rl.rollout.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS

    src = Path(adapter_dir)
    digest = hashlib.sha256()
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if (src / name).is_file():
            digest.update((src / name).read_bytes())
    target = Path(".cache") / "merged" / digest.hexdigest()[:16]
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")):
        return target
    return merge_adapter_dir(src, target)
