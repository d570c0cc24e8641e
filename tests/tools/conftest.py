"""Fixtures for tool rollouts: an offline BPE tokenizer (merges, so re-tokenising decoded text can differ from
the ids a model emitted) and one python tool on the warm Docker pool."""

from __future__ import annotations

import string
from collections.abc import Iterator
from typing import Any

import pytest

import sandboxes
from reasoning_rl.tiny import CHAT_TEMPLATE, SPECIAL
from reasoning_rl.tools.python_tool import PythonTool

_MERGES = [("4", "2"), ("`", "`"), ("``", "`"), ("p", "r"), ("pr", "i"), ("n", "t"), ("pri", "nt")]


@pytest.fixture(scope="session")
def bpe_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL + list(string.printable[:-2]))}
    for a, b in _MERGES:
        vocab.setdefault(a + b, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=_MERGES, unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
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
