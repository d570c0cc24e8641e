"""Fixtures for tool rollouts: an offline BPE tokenizer (merges, so re-tokenising decoded text can differ from
the ids a model emitted), Qwen-style tokenizers with the Qwen3 / Qwen2.5-Math chat templates (their special and
added tokens, the templates written out in tests/fixtures/chat_templates: no hub download) and one python tool
on the warm Docker pool."""

from __future__ import annotations

import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sandboxes
from reasoning_rl.tiny import CHAT_TEMPLATE, SPECIAL
from reasoning_rl.tools.python_tool import PythonTool

_MERGES = [("4", "2"), ("`", "`"), ("``", "`"), ("p", "r"), ("pr", "i"), ("n", "t"), ("pri", "nt")]
_TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added, not special, in Qwen2.5/Qwen3 (so they survive skip_special_tokens, as stop strings need)
QWEN_ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


def _bpe(special: list[str], unk: str | None) -> Any:
    from tokenizers import Tokenizer, decoders, models

    vocab = {tok: i for i, tok in enumerate(special + list(string.printable[:-2]))}
    for a, b in _MERGES:
        vocab.setdefault(a + b, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=_MERGES, unk_token=unk))
    tok.decoder = decoders.Fuse()
    return tok


def _qwen(template: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=_bpe(QWEN_SPECIAL, None),
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        additional_special_tokens=QWEN_SPECIAL[1:],
    )
    fast.add_tokens(QWEN_ADDED)
    fast.chat_template = (_TEMPLATES / template).read_text()
    return fast


@pytest.fixture(scope="session")
def qwen3_tokenizer() -> Any:
    return _qwen("qwen3.jinja")


@pytest.fixture(scope="session")
def qwen25_math_tokenizer() -> Any:
    return _qwen("qwen2_5_math.jinja")


@pytest.fixture(scope="session")
def bpe_tokenizer() -> Any:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=_bpe(SPECIAL, "<unk>"),
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        additional_special_tokens=SPECIAL[3:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


@pytest.fixture(scope="session")
def python_tool() -> Iterator[PythonTool]:
    ok, why = sandboxes.check("docker")
    if not ok:
        pytest.fail(f"docker sandbox unusable: {why} (run scripts/services.sh)")
    tool = PythonTool("docker", pool_size=2)
    yield tool
    tool.close()
