"""Several vLLM engine cores behind one rollout engine (``rollout.engine_cores``), each in a process of its own on
the same device.

At small models vLLM's decode step is bound by the host: ~20 us per running request per step in the engine core
(scheduler and model-runner bookkeeping) with the GPU 5-15 % busy at the anchor's shape. Two engine cores, each
stepping half the requests in its own process, decoded 1.9x one in a probe under py-spy (``bench/gpu/engine_mode.py``,
mode ``mp2``; not yet timed without it, nor in a run).
Requests are dealt by prompt (round-robin over distinct prompts, in submission order, across calls), so one
prompt's samples share its prefix-cache blocks on one core. Each core decodes in its own process whether or not we
read its outputs: ``advance`` steps the busy cores in turn (``LLMEngine.step`` blocks until that core has a step's
output, which is queued meanwhile), and the blocking calls that wait on every core at once (weight buckets,
fingerprints, whole generations) run one thread per core (``vllm_transfer.each``). This module also owns the
``vllm`` engine kind's factory: one ``VLLMEngine``, or ``VLLMCores`` of several.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable
from typing import Any

import torch

from reasoning_rl.rollout.base import (
    Completion,
    Delta,
    Request,
    RolloutError,
    SamplingConfig,
    check_prompts,
    register_engine,
)
from reasoning_rl.rollout.fingerprints import EngineWeights, compare_fingerprints
from reasoning_rl.rollout.vllm_engine import VLLMEngine
from reasoning_rl.rollout.vllm_transfer import each, ship

# Mean |delta log p| per scored token allowed between a core and core 0 on the same sequences: the cores hold the
# same weights (their fingerprints agree) and run the same kernels, so only reduction order may differ; a core
# whose forward pass went wrong (a layer not re-packed after a load) is far above it.
CORE_SCORE_SPREAD = 1e-2


class VLLMCores:
    """``engine_cores`` ``VLLMEngine``\\ s with ``engine_process``, each its 1/N of the device share (and of
    ``kv_cache_memory_bytes``) and its own seed (``seed + k``), driven as one ``RolloutEngine`` /
    ``ContinuousEngine`` / inspectable engine."""

    def __init__(
        self,
        model_path: str,
        *,
        cores: int,
        seed: int = 0,
        gpu_memory_utilization: float = 0.3,
        **kw: Any,
    ) -> None:
        if cores < 2 or not kw.get("engine_process"):
            raise RolloutError(
                f"VLLMCores needs >= 2 cores with engine_process=True (got {cores} cores, "
                f"engine_process={kw.get('engine_process')})"
            )
        if "kv_cache_memory_bytes" in kw:
            kw["kv_cache_memory_bytes"] //= cores
        self.cores: list[VLLMEngine] = []
        try:
            for k in range(cores):  # one after another: each core's start sees what the previous one took
                self.cores.append(
                    VLLMEngine(
                        model_path, seed=seed + k, gpu_memory_utilization=gpu_memory_utilization / cores, **kw
                    )
                )
        except BaseException:
            self.close()  # no engine process outlives a failed start
            raise
        first = self.cores[0]
        self.tokenizer = first.tokenizer
        self.max_model_len = first.max_model_len
        self.sleep_enabled = first.sleep_enabled
        self.core_of: dict[str, int] = {}  # each live continuous request's core
        self._next = 0  # the core the next distinct prompt goes to

    def deal(self, prompts: Iterable[list[int]]) -> list[int]:
        """Each prompt's core: equal prompts to one core, distinct ones round-robin from where the last call
        stopped (admissions of one group at a time still spread)."""
        placed: dict[tuple[int, ...], int] = {}
        found = []
        for prompt in prompts:
            key = tuple(prompt)
            if key not in placed:
                placed[key] = self._next
                self._next = (self._next + 1) % len(self.cores)
            found.append(placed[key])
        return found

    # ------------------------------------------------------------------------------------------ RolloutEngine
    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        """Each core generates its prompts (one thread per core; every sample keeps the seed it would have in one
        engine: ``prompt_seeds`` follow their prompts), the completions renumbered to ``prompts``' indices."""
        mine: list[list[int]] = [[] for _ in self.cores]
        for i, k in enumerate(self.deal(prompts)):
            mine[k].append(i)
        parts = [(core, idx) for core, idx in zip(self.cores, mine, strict=True) if idx]

        def run(part: tuple[VLLMEngine, list[int]]) -> list[Completion]:
            core, idx = part
            seeds = None if sampling.prompt_seeds is None else tuple(sampling.prompt_seeds[i] for i in idx)
            sub = sampling.model_copy(update={"prompt_seeds": seeds})
            done = core.generate([prompts[i] for i in idx], sub)
            return [dataclasses.replace(c, prompt_index=idx[c.prompt_index]) for c in done]

        found = [c for done in each(run, parts) for c in done]
        return sorted(found, key=lambda c: (c.prompt_index, c.sample_index))

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], *, version: int) -> None:
        """One pass over ``named_tensors``: each bucket packed once and loaded by every core at once before it is
        freed (``vllm_transfer.ship``); then each core takes ``version`` (new cache salt, old blocks dropped)."""
        first = self.cores[0]
        ship(
            [c.llm for c in self.cores],
            named_tensors,
            in_place=all(c.loads_in_place for c in self.cores),
            bucket_bytes=first.handoff_bucket_bytes,
        )
        for core in self.cores:
            core.loaded(version)

    @property
    def version(self) -> int:
        return self.cores[0].version

    def sleep(self, keep_weights: bool = True) -> None:
        each(lambda c: c.sleep(keep_weights), self.cores)

    def wake(self) -> None:
        each(lambda c: c.wake(), self.cores)

    @property
    def asleep(self) -> bool:
        return any(c.asleep for c in self.cores)

    # --------------------------------------------------------------------------------------- ContinuousEngine
    def submit(self, requests: list[Request]) -> None:
        """Each request to its prompt's core (``deal``), remembered for ``abort`` / ``partial``; every prompt
        checked first, so a bad one admits none."""
        check_prompts([r.prompt_ids for r in requests], self.max_model_len)
        mine: list[list[Request]] = [[] for _ in self.cores]
        for r, k in zip(requests, self.deal([r.prompt_ids for r in requests]), strict=True):
            mine[k].append(r)
        for k, (core, rs) in enumerate(zip(self.cores, mine, strict=True)):
            if rs:
                core.submit(rs)
                self.core_of.update((r.id, k) for r in rs)

    def advance(self) -> list[Delta]:
        """One step of every core with live requests (an idle core's ``step`` would wait forever), in turn; the
        others decode meanwhile in their own processes."""
        found: list[Delta] = []
        for k in sorted(set(self.core_of.values())):
            found.extend(self.cores[k].advance())
        for d in found:
            if d.finished:
                del self.core_of[d.id]
        return found

    def abort(self, ids: list[str]) -> None:
        for k, rids in self._by_core(ids).items():
            self.cores[k].abort(rids)
            for rid in rids:
                del self.core_of[rid]

    def partial(self, ids: list[str]) -> list[Delta]:
        return [d for k, rids in self._by_core(ids).items() for d in self.cores[k].partial(rids)]

    def running(self) -> int:
        return sum(c.running() for c in self.cores)

    @property
    def sampled(self) -> int:
        return sum(c.sampled for c in self.cores)

    def _by_core(self, ids: list[str]) -> dict[int, list[str]]:
        """``ids`` of live requests by core (ids no core holds, finished or never submitted, are left out)."""
        out: dict[int, list[str]] = {}
        for rid in ids:
            if rid in self.core_of:
                out.setdefault(self.core_of[rid], []).append(rid)
        return out

    # ------------------------------------------------------------------------------------- freshness check
    def weight_fingerprints(self) -> EngineWeights:
        """Every core's checksums (read at once); core 0's, after every other core is found to hold the same
        weights: a core that missed a hand-off fails here, named, though core 0 would pass the gate."""
        found = each(lambda c: c.weight_fingerprints(), self.cores)
        for k, held in enumerate(found[1:], start=1):
            problem = compare_fingerprints(found[0].fingerprints, held)
            if problem is not None:
                raise RolloutError(f"engine core {k} does not hold core 0's weights: {problem}")
        return found[0]

    def score(self, sequences: list[list[int]], prompt_lens: list[int]) -> list[list[float]]:
        """Core 0's log-probs of the fixed tokens, after every core scored them too (at once) within
        ``CORE_SCORE_SPREAD`` of core 0: the gate compares one set with the trainer, and each core's forward
        pass is checked through it."""
        found = each(lambda c: c.score(sequences, prompt_lens), self.cores)
        for k, rows in enumerate(found[1:], start=1):
            diffs = [
                abs(a - b) for r0, r in zip(found[0], rows, strict=True) for a, b in zip(r0, r, strict=True)
            ]
            spread = sum(diffs) / max(len(diffs), 1)
            if not spread <= CORE_SCORE_SPREAD:
                raise RolloutError(
                    f"engine core {k} scores {spread:.3g} nats/token away from core 0 (allowed "
                    f"{CORE_SCORE_SPREAD}): its forward pass does not match"
                )
        return found[0]

    def close(self) -> None:
        """End every core's process (each one's ``close`` runs even when another's fails)."""
        with contextlib.ExitStack() as stack:
            for core in self.cores:
                stack.callback(core.close)


@register_engine("vllm")
def _make(model_path: str, *, engine_cores: int = 1, **kw: Any) -> VLLMEngine | VLLMCores:
    """The ``vllm`` engine kind: one engine, or ``engine_cores`` (``rollout.engine_cores``) behind one."""
    if engine_cores == 1:
        return VLLMEngine(model_path, **kw)
    return VLLMCores(model_path, cores=engine_cores, **kw)
