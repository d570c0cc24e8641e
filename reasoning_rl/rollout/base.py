"""The rollout-engine contract shared by the vLLM engine and the plain-transformers fallback."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from pydantic import ConfigDict

from reasoning_rl.config import SamplingParams
from reasoning_rl.registry import ENGINES

if TYPE_CHECKING:
    from reasoning_rl.tools.base import ToolTurn


class SamplingConfig(SamplingParams):
    """One engine request: the sampling parameters (defined once, in ``config.SamplingParams``), the seed
    (None: the engine's own stream; else sample j of every prompt uses ``seed + j``) and whether to return
    each sampled token's log-prob (engines may skip that work when False). ``prompt_seeds`` (one per prompt,
    overriding ``seed``: sample j of prompt i uses ``prompt_seeds[i] + j``) lets a caller whose requests mix
    unrelated contexts, such as the multi-turn tool loop's waves, tie each one's randomness to itself rather
    than to its position in the call. ``prompt_offset`` is the index of ``prompts[0]`` in the whole batch when
    a batch is split over ranks (for a continuous ``Request``: its group's index among those admitted with it),
    so an engine that seeds per prompt (the hf engine: ``seed + prompt index``) samples the same whatever the
    split, streamed or submitted."""

    model_config = ConfigDict(frozen=True)

    seed: int | None = None
    prompt_seeds: tuple[int, ...] | None = None
    logprobs: bool = True
    prompt_offset: int = 0

    def seed_for(self, prompt_index: int, sample_index: int) -> int | None:
        """The seed of sample ``sample_index`` of prompt ``prompt_index`` (None: the engine's own stream)."""
        if self.prompt_seeds is not None:
            return self.prompt_seeds[prompt_index] + sample_index
        return None if self.seed is None else self.seed + sample_index

    @classmethod
    def of(cls, params: SamplingParams, *, seed: int | None, logprobs: bool) -> SamplingConfig:
        """The request for ``params`` (e.g. the validated ``rollout`` section)."""
        return cls(
            **params.model_dump(include=set(SamplingParams.model_fields)), seed=seed, logprobs=logprobs
        )


@dataclass(frozen=True)
class DraftCounts:
    """Speculative decoding of one completion, as vLLM counted it: verify steps that carried a draft, draft
    tokens proposed, and draft tokens accepted (each accepted token is a decode step saved)."""

    drafts: int
    draft_tokens: int
    accepted: int

    def __add__(self, other: DraftCounts) -> DraftCounts:
        return DraftCounts(
            self.drafts + other.drafts, self.draft_tokens + other.draft_tokens, self.accepted + other.accepted
        )


@dataclass
class Completion:
    """One sampled response. ``logprobs[i]`` is the raw (temperature-1, unfiltered) log-prob of
    ``token_ids[i]`` under the engine's current weights, comparable to ``Policy.logprobs``.

    A multi-turn tool rollout's completion also carries ``mask`` (1 on the tokens the model produced, 0 on the
    inserted tool-turn tokens, which get log-prob 0.0 and no loss) and its ``turns``; ``error`` is set when our
    infrastructure ruined the trajectory (the sample is then masked, never graded)."""

    prompt_index: int
    sample_index: int
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: (
        str  # "stop" (EOS or a stop string) | "length" (max_tokens reached); tools: | "max_turns" | "error"
    )
    mask: list[int] | None = None
    turns: list[ToolTurn] = field(default_factory=list)
    error: str = ""
    versions: list[int] | None = None  # the engine's version that sampled each token (None: unknown)
    drafts: DraftCounts | None = None  # rollout.speculative: what the engine's speculation did for it


@dataclass(frozen=True)
class Request:
    """One continuous-generation request (``ContinuousEngine.submit``): ``sampling.max_tokens`` is what is left
    of the budget (a request resumed from partial tokens carries them at the end of ``prompt_ids``), ``seed``
    its own (the engine salts its prefix cache with the weights it holds: nothing for the caller to do).
    ``deltas=False``: its tokens come back once, when it finishes, each with the version that sampled it
    (``Delta.versions``: the engine records, at each weight swap, how far every resident request had got), and
    what it has so far only when asked (``ContinuousEngine.partial``): no per-step output, the cheap path at
    ~1,000 resident requests (issue 44). ``deltas=True``: one ``Delta`` per engine step. ``group``: the prompt
    group it samples for, so an engine spread over several ranks keeps a group's samples on one of them."""

    id: str
    prompt_ids: list[int]
    sampling: SamplingConfig
    seed: int | None
    deltas: bool = True
    group: int = 0


@dataclass(frozen=True)
class Delta:
    """What one engine step added to a live request: new tokens with their log-probs (and text when stop
    strings need it live), whether it finished and why, and the prompt tokens served from the prefix cache
    (reported with the request's first delta, None after). ``version``: the policy version of the weights
    that sampled these tokens, stamped by the engine when it stepped (the engine owns its version; a rollout
    rank that decodes during the update stamps the old version until the swap), never filled in afterwards.
    ``versions``: one per token where they are not all ``version`` (a whole response that lived across a swap;
    ``version`` is then its last token's)."""

    id: str
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finished: bool
    finish_reason: str
    cached_tokens: int | None = None
    drafts: DraftCounts | None = None  # rollout.speculative: the request's counts, on its finishing delta
    version: int = field(kw_only=True)
    versions: list[int] | None = field(default=None, kw_only=True)

    def token_versions(self) -> list[int]:
        """The policy version of each of ``token_ids``."""
        return [self.version] * len(self.token_ids) if self.versions is None else self.versions


@runtime_checkable
class ContinuousEngine(Protocol):
    """An engine the trainer drives step by step, with requests that stay resident across weight updates
    (``rollout.max_lag``): not stepping it is pausing it."""

    def submit(self, requests: list[Request]) -> None:
        """Admit these requests (they start at the next ``advance``)."""
        ...

    def advance(self) -> list[Delta]:
        """One engine step: every live request's new tokens."""
        ...

    def abort(self, ids: list[str]) -> None:
        """Stop these requests and free their cache."""
        ...

    def running(self) -> int:
        """Requests in the engine's running batch now (the number that shows whether the tail is gone)."""
        ...

    @property
    def sampled(self) -> int:
        """Tokens sampled for its requests so far, as of the last ``advance``, each counted in the step that
        sampled it (a ``deltas=False`` request's too, though it reports only at its end): the per-step
        generation figures are differences of two reads."""
        ...

    def partial(self, ids: list[str]) -> list[Delta]:
        """What each of these unfinished ``deltas=False`` requests has generated so far (tokens, log-probs, text,
        per-token versions; ``finished`` False), read for a ``park`` or a checkpoint; they stay resident.
        Requests with nothing unreported (finished, or ``deltas=True``) are left out."""
        ...

    @property
    def version(self) -> int:
        """The policy version of the weights the engine holds (``RolloutEngine.version``)."""
        ...


@runtime_checkable
class ClosableEngine(Protocol):
    """An engine holding what must end with the run, not at interpreter exit (an engine process, adapter
    files): its rank calls ``close`` when the run closes."""

    def close(self) -> None: ...


@runtime_checkable
class RolloutEngine(Protocol):
    """Generates completions and takes new weights from the trainer."""

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        """All completions, ordered by (prompt_index, sample_index)."""
        ...

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], *, version: int) -> None:
        """Replace the weights with these (HF checkpoint names; consumed lazily, one pass), policy version
        ``version`` (the updates behind them), which the engine reports from then on."""
        ...

    @property
    def version(self) -> int:
        """The policy version of the weights the engine holds: 0 for those it was built with, else what the
        last ``load_weights`` was given. The one record of it: the trainer asks, never computes it."""
        ...

    def sleep(self, keep_weights: bool = True) -> None:
        """Release accelerator memory while the trainer runs (no-op where unsupported).

        ``keep_weights=False``: the weights may be discarded too (cheaper); load new ones after ``wake``.
        """
        ...

    def wake(self) -> None:
        """Undo ``sleep`` before generating again (a no-op when awake)."""
        ...

    @property
    def asleep(self) -> bool:
        """Whether ``sleep`` released the engine (the one record of its sleep state: the trainer asks, never
        tracks it)."""
        ...


class RolloutError(RuntimeError):
    """A rollout engine could not be built or used (bad path, bad prompt, engine failure)."""


def register_engine(kind: str) -> Callable[[Callable[..., RolloutEngine]], Callable[..., RolloutEngine]]:
    """Register an engine factory under ``kind`` (plugins can add their own; ``rollout.engine=kind`` then
    validates). Installed packages can publish one under the ``reasoning_rl.engines`` entry points instead."""
    return ENGINES.register(kind)


def make_engine(
    kind: str,
    model_path: str,
    *,
    dtype: str = "auto",
    seed: int = 0,
    gpu_memory_utilization: float = 0.3,
    max_model_len: int = 1024,
    enable_sleep_mode: bool | None = None,
    **kw: Any,
) -> RolloutEngine:
    """Build a rollout engine for the HF model directory ``model_path``.

    ``enable_sleep_mode=None`` turns sleep mode on exactly when a CUDA device is present.
    Extra keywords go to the engine (vLLM: ``LLM(...)`` arguments; hf: ``device``).
    """
    factory = ENGINES.get(kind)  # ValueError naming the registered kinds for an unknown one
    if not Path(model_path).is_dir():
        raise RolloutError(
            f"model path {model_path!r} is not a directory; rollout engines need a local HF model dir "
            "(convert GGUF checkpoints first with reasoning_rl.policy.convert_gguf)"
        )
    return factory(
        model_path,
        dtype=dtype,
        seed=seed,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        enable_sleep_mode=enable_sleep_mode,
        **kw,
    )


def check_prompts(prompts: list[list[int]], max_model_len: int) -> None:
    """Clear errors for empty prompts and prompts that leave no room to generate."""
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise RolloutError(f"prompt {i} is empty (no token ids)")
        if len(p) + 1 > max_model_len:
            raise RolloutError(
                f"prompt {i} has {len(p)} tokens; max_model_len={max_model_len} leaves no room to generate"
            )
