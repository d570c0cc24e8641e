"""``rrl train model.path=RUN_DIR``: a run directory (``rrl sft``'s or ``rrl train``'s) or a PEFT adapter
directory stands for the model it holds, with no conversion step for the user."""

from __future__ import annotations

from pathlib import Path

from reasoning_rl.config import Config, load_config


def start_model(cfg: Config) -> str | None:
    """The HF model dir ``model.path`` stands for when it is a run directory (an ``rrl sft`` or ``rrl train``
    run: its latest checkpoint, exported once to RUN_DIR/export/step_N) or a PEFT adapter directory (merged
    into its base once); None when it is a model already. The reference model of a KL term starts from the
    same weights, so RL after SFT is anchored to the SFT result."""
    path = cfg.model.path
    if cfg.model.gguf_file is not None or not Path(path).is_dir():
        return None
    from reasoning_rl.policy.lora import is_adapter_dir
    from reasoning_rl.trainer.run_model import is_run_dir, model_from_adapter, model_from_run

    if is_run_dir(path):
        return str(model_from_run(Path(path).resolve(), None).resolve())
    if is_adapter_dir(path):
        return str(model_from_adapter(path).resolve())
    return None


def with_start_model(cfg: Config, config_path: str, overrides: list[str]) -> tuple[Config, list[str]]:
    """``cfg`` and ``overrides`` with ``model.path`` pointing at ``start_model``'s directory when it differs."""
    resolved = start_model(cfg)
    if resolved is None:
        return cfg, overrides
    extra = [*overrides, f"model.path={resolved}"]
    return load_config(config_path, extra), extra
