"""Exported model directories are readable like the files around them (issue 30: ``model.safetensors`` was 0600,
written through safetensors' private temporary file, while config and tokenizer were 0644); failed on main
5090d93."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.mark.slow
def test_every_exported_file_gets_the_umask_mode(tmp_path: Path, tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reasoning_rl.policy.model import save_hf_model

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    old = os.umask(0o022)
    try:
        out = save_hf_model(tmp_path / "export", model, tokenizer)
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir() if p.is_file()}
    assert "model.safetensors" in modes and "config.json" in modes
    assert set(modes.values()) == {0o644}, {name: oct(mode) for name, mode in modes.items()}
