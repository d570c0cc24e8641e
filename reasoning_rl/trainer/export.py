"""``rrl export RUN_DIR``: turn a checkpoint into a plain HF model directory (on demand, any time, from anywhere).

Checkpoints are self-contained: each ``step_N/`` holds the model's config, generation config and tokenizer
under ``hf/`` beside the weights, so exporting needs neither the base model nor the directory training ran
in. The result has the same layout as the end-of-training export (one writer: ``save_hf_model``).

A LoRA run's checkpoint holds only its adapters: ``form="merged"`` (default) merges them into the base model
they name (checked by hash) for a plain HF dir; ``form="adapter"`` writes a PEFT adapter directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml

from reasoning_rl.checkpoint import ADAPTER_DIR, MODEL_FILES, POLICY_DIR, CheckpointManager


def _model_and_tokenizer(run: Path, checkpoint: Path) -> tuple[Any, Any]:
    """An HF model skeleton (weights are loaded after) and the tokenizer, from the checkpoint's own files;
    checkpoints written before they carried them fall back to the base model the run trained from."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    files = checkpoint / MODEL_FILES
    if (files / "config.json").is_file():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(files))
        if (files / "generation_config.json").is_file():
            model.generation_config = GenerationConfig.from_pretrained(files)
        return model, AutoTokenizer.from_pretrained(files)
    from reasoning_rl.policy.model import load_causal_lm, load_tokenizer

    state = CheckpointManager.load_trainer_state(checkpoint)
    cfg = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    named = str(cfg["model"]["path"])
    for candidate in (state.get("model_dir"), named):
        if candidate and Path(candidate).is_dir():
            return load_causal_lm(str(candidate), dtype="float32"), load_tokenizer(str(candidate))
    raise FileNotFoundError(
        f"{checkpoint} carries no model files ({MODEL_FILES}/: written by an older version) and its base model "
        f"{named!r} is not found from {Path.cwd()}; run `rrl export` from the directory training ran in"
    )


ExportForm = Literal["merged", "adapter"]


def export_checkpoint(
    run_dir: str | Path,
    *,
    step: int | None = None,
    out: str | Path | None = None,
    form: ExportForm = "merged",
) -> Path:
    """Write checkpoint ``step`` (default: latest complete) of ``run_dir`` as safetensors + tokenizer: a plain
    HF model dir, or with ``form="adapter"`` (LoRA runs) a PEFT adapter directory."""
    from reasoning_rl.policy.model import save_hf_model
    from reasoning_rl.policy.sharded import read_model_state

    run = Path(run_dir)
    if not (run / "config.yaml").is_file():
        raise FileNotFoundError(f"{run} is not a run directory (no config.yaml)")
    mgr = CheckpointManager(run / "checkpoints")
    found = {c.step: c for c in mgr.list()}
    if not found:
        raise FileNotFoundError(f"{run} has no complete checkpoint to export")
    if step is not None and step not in found:
        raise FileNotFoundError(f"no complete checkpoint for step {step} in {run}; have: {sorted(found)}")
    info = found[step if step is not None else max(found)]
    target = Path(out) if out is not None else run / "export" / f"step_{info.step}"
    if (info.path / ADAPTER_DIR).is_dir():
        return _export_lora(info.path, target, form)
    if form == "adapter":
        raise FileNotFoundError(
            f"{info.path} holds no LoRA adapters (a full fine-tuning run): export it as a merged model"
        )
    model, tokenizer = _model_and_tokenizer(run, info.path)
    state = read_model_state(info.path / POLICY_DIR)
    # the policy checkpoints its scoring wrapper, whose HF model sits under "lm."
    model.load_state_dict({k.removeprefix("lm."): v for k, v in state.items()})
    return save_hf_model(target, model, tokenizer)


def _export_lora(checkpoint: Path, target: Path, form: ExportForm) -> Path:
    """A LoRA checkpoint as a PEFT adapter dir, or merged into its base (through that adapter dir)."""
    import tempfile

    from transformers import AutoTokenizer

    from reasoning_rl.policy.lora import merge_adapter_dir, save_adapter_dir
    from reasoning_rl.policy.sharded import read_model_state

    adapters = {k.removeprefix("lm."): v for k, v in read_model_state(checkpoint / POLICY_DIR).items()}
    tokenizer = AutoTokenizer.from_pretrained(checkpoint / MODEL_FILES)
    if form == "adapter":
        return save_adapter_dir(target, checkpoint / ADAPTER_DIR, adapters, tokenizer)
    with tempfile.TemporaryDirectory(prefix="rrl-adapter-") as tmp:
        return merge_adapter_dir(
            save_adapter_dir(Path(tmp) / "adapter", checkpoint / ADAPTER_DIR, adapters, tokenizer), target
        )
