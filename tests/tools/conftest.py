"""Fixtures for tool rollouts: an offline BPE tokenizer (merges, so re-tokenising decoded text can differ from
the ids a model emitted), a scripted-policy engine stand-in, and one python tool on the warm Docker pool."""

from __future__ import annotations

import string
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import sandboxes
from reasoning_rl.rollout.base import Completion, SamplingConfig
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
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
                                   additional_special_tokens=SPECIAL[3:])
    fast.chat_template = CHAT_TEMPLATE
    return fast


Step = str | list[int] | Callable[[str], str | list[int]]


class ScriptedEngine:
    """A deterministic ``RolloutEngine`` stand-in: for each prompt a list of steps (text, exact token ids, or a
    function of the decoded context so far), emitted one per ``generate`` call. Records every context it saw."""

    def __init__(self, tokenizer: Any, scripts: dict[str, list[Step]], eos: bool = True) -> None:
        self.tok, self.eos = tokenizer, eos
        self.scripts = {tuple(tokenizer.encode(p)): list(steps) for p, steps in scripts.items()}
        self.seen: list[str] = []
        self.calls = 0

    def prompt(self, text: str) -> list[int]:
        return list(self.tok.encode(text))

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        self.calls += 1
        out = []
        for i, ctx in enumerate(prompts):
            key = next(k for k in self.scripts if tuple(ctx[: len(k)]) == k)
            text = self.tok.decode(ctx, skip_special_tokens=False)
            self.seen.append(text)
            step = self.scripts[key].pop(0)
            step = step(text) if callable(step) else step
            ids = list(self.tok.encode(step)) if isinstance(step, str) else list(step)
            if not self.scripts[key] and self.eos and (not ids or ids[-1] != self.tok.eos_token_id):
                ids.append(self.tok.eos_token_id)
            finish = "stop"
            if len(ids) > sampling.max_tokens:  # the rest comes with the next call, as a real engine would
                self.scripts[key].insert(0, ids[sampling.max_tokens :])
                ids, finish = ids[: sampling.max_tokens], "length"
            logprobs = [-(k + 1) / 100 for k in range(len(ids))]
            out.append(Completion(i, 0, list(ctx), ids, logprobs, self.tok.decode(ids), finish))
        return out

    def stream(self, prompts: list[list[int]], sampling: SamplingConfig) -> Iterator[Completion]:
        yield from self.generate(prompts, sampling)

    def load_weights(self, named_tensors: Any) -> None:
        raise NotImplementedError("scripted engine has no weights")

    def sleep(self, keep_weights: bool = True) -> None:
        """Nothing to release."""

    def wake(self) -> None:
        """Nothing to restore."""


@pytest.fixture(scope="session")
def python_tool() -> Iterator[PythonTool]:
    ok, why = sandboxes.check("docker")
    if not ok:
        pytest.fail(f"docker sandbox unusable: {why} (run scripts/services.sh)")
    tool = PythonTool("docker", pool_size=2)
    yield tool
    tool.close()
