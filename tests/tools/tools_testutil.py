"""A scripted-policy ``RolloutEngine`` stand-in for tool-rollout tests (a uniquely named module: several
``conftest.py`` files exist, so ``from conftest import ...`` would pick whichever was imported first)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from reasoning_rl.rollout.base import Completion, SamplingConfig

Step = str | list[int] | Callable[[str], str | list[int]]


class ScriptedEngine:
    """A deterministic ``RolloutEngine`` stand-in: for each prompt a list of steps (text, exact token ids, or a
    function of the decoded context so far), emitted one per ``generate`` call. Records every context it saw,
    the seed each context was sampled with (``seeds``: one per call and context, in order) and, per script,
    its seeds (``seeds_of[prompt text]``)."""

    def __init__(self, tokenizer: Any, scripts: dict[str, list[Step]], eos: bool = True) -> None:
        self.tok, self.eos = tokenizer, eos
        self.scripts = {tuple(tokenizer.encode(p)): list(steps) for p, steps in scripts.items()}
        self.seen: list[str] = []
        self.seeds: list[int | None] = []
        self.seeds_of: dict[str, list[int | None]] = {p: [] for p in scripts}
        self._names = {tuple(tokenizer.encode(p)): p for p in scripts}
        self.calls = 0

    def prompt(self, text: str) -> list[int]:
        return list(self.tok.encode(text))

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        self.calls += 1
        out = []
        for i, ctx in enumerate(prompts):
            key = next(k for k in self.scripts if tuple(ctx[: len(k)]) == k)
            self.seeds.append(sampling.seed_for(i, 0))
            self.seeds_of[self._names[key]].append(sampling.seed_for(i, 0))
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

    def load_weights(self, named_tensors: Any, *, version: int) -> None:
        raise NotImplementedError("scripted engine has no weights")

    @property
    def version(self) -> int:
        return 0  # never loads: the weights it started with

    def sleep(self, keep_weights: bool = True) -> None:
        """Nothing to release."""

    def wake(self) -> None:
        """Nothing to restore."""
