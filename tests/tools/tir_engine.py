"""A scripted tool-integrated-reasoning policy as a registered rollout engine (``rollout.engine:
scripted_tir``), for CPU training runs with the real python tool: for "What is EXPR?" it calls the python tool
with code printing EXPR (or, for about a third of the seeds, EXPR+1: a wrong program, so GRPO groups carry signal),
and after the tool's turn it answers \\boxed{<the output>}. Its choices are a function of the
request's per-trajectory seed only, so reruns of one run seed produce the same samples. Calls are Hermes
``<tool_call>`` JSON without whitespace: the tiny model's tokenizer, as transformers loads it, drops spaces and
newlines, which a fenced block needs.

``CRASH["after_loads"] = L`` makes it raise on the first generate call after L weight loads whose contexts
include a tool output (a crash with other trajectories' tool calls in flight)."""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Iterator
from typing import Any

from reasoning_rl.rollout.base import Completion, SamplingConfig, register_engine

CRASH: dict[str, int | None] = {"after_loads": None}
_QUESTION = re.compile(r"What ?is ?([0-9+\-* ]+)\?")
_OUTPUT = re.compile(r"<\|tool\|>(.*?)<\|end\|>", re.DOTALL)


class SimulatedCrash(RuntimeError):
    pass


class ScriptedTIREngine:
    def __init__(self, model_path: str, **_: Any) -> None:
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(model_path)
        self.loads = 0
        self.version = 0  # the policy version of the last load (the engine's own record)
        self.calls = 0

    def _step(self, ctx: list[int], seed: int | None) -> list[int]:
        text = self.tok.decode(ctx, skip_special_tokens=False)
        outputs = _OUTPUT.findall(text)
        if outputs:
            return [
                *self.tok.encode(f"The answer is \\boxed{{{outputs[-1].strip()}}}"),
                self.tok.eos_token_id,
            ]
        m = _QUESTION.search(text)
        expr = m.group(1).strip() if m else "0"
        wrong = random.Random(seed).random() < 1 / 3
        code = f"print({expr}{'+1' if wrong else ''})"
        return list(
            self.tok.encode(f'<tool_call>{{"name":"python","arguments":{{"code":"{code}"}}}}</tool_call>')
        )

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        self.calls += 1
        after = CRASH["after_loads"]
        if (
            after is not None
            and self.loads >= after
            and any(_OUTPUT.search(self.tok.decode(p)) for p in prompts)
        ):
            raise SimulatedCrash(f"simulated crash at generate call {self.calls}")
        out = []
        for i, ctx in enumerate(prompts):
            ids = self._step(ctx, sampling.seed_for(i, 0))[: sampling.max_tokens]
            text = self.tok.decode(ids, skip_special_tokens=True)
            out.append(Completion(i, 0, list(ctx), ids, [-1.0] * len(ids), text, "stop"))
        return out

    def stream(self, prompts: list[list[int]], sampling: SamplingConfig) -> Iterator[Completion]:
        yield from self.generate(prompts, sampling)

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]], *, version: int) -> None:
        for _ in named_tensors:
            pass
        self.loads += 1
        self.version = version

    def sleep(self, keep_weights: bool = True) -> None:
        """Nothing to release."""

    def wake(self) -> None:
        """Nothing to restore."""

    @property
    def asleep(self) -> bool:
        return False


@register_engine("scripted_tir")
def _make(model_path: str, **kw: Any) -> ScriptedTIREngine:
    return ScriptedTIREngine(model_path, **kw)
