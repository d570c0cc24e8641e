"""vLLM's side of ``rollout.speculative``: the engine arguments of each method, the ``group`` proposer (a vLLM
custom-class proposer over ``GroupDrafts``) and each request's draft counts, read from vLLM's scheduler.

vLLM builds the proposer from its config alone (``speculative_config.model`` names this class); the engine
then hands it the draft index and the model runner (``attach``, through ``collective_rpc``: the engine core is
in-process, so both are the same objects the engine records into). The runner's input batch maps each row
to its request and so to its prompt: drafts for a row come only from that prompt's earlier samples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from reasoning_rl.config import SpeculativeConfig
from reasoning_rl.rollout.base import DraftCounts
from reasoning_rl.rollout.group_drafts import GroupDrafts

GROUP_PROPOSER = f"{__name__}.GroupProposer"


def speculative_config(spec: SpeculativeConfig) -> dict[str, Any]:
    """``LLM(speculative_config=...)`` for a method other than off."""
    k = spec.num_speculative_tokens
    if spec.method == "ngram":
        return dict(
            method="ngram",
            num_speculative_tokens=k,
            prompt_lookup_min=spec.lookup_min,
            prompt_lookup_max=spec.lookup_max,
        )
    if spec.method == "group":
        return dict(method="custom_class", model=GROUP_PROPOSER, num_speculative_tokens=k)
    return dict(method=spec.method, num_speculative_tokens=k)


def group_drafts(spec: SpeculativeConfig) -> GroupDrafts:
    return GroupDrafts(
        lookup_min=spec.lookup_min,
        lookup_max=spec.lookup_max,
        samples_per_prompt=spec.group_samples,
        max_bytes=spec.group_max_bytes,
    )


def attach(worker: Any, drafts: GroupDrafts) -> None:
    """``collective_rpc`` target: give the worker's ``GroupProposer`` the draft index and its runner."""
    runner = worker.model_runner
    proposer = getattr(runner, "drafter", None)
    if not isinstance(proposer, GroupProposer):
        raise RuntimeError(f"the vLLM worker's drafter is {type(proposer).__name__}, not GroupProposer")
    proposer.drafts, proposer.runner = drafts, runner


def gate_drafts(worker: Any, max_batch: int) -> None:
    """``collective_rpc`` target: the worker's drafter proposes only while at most ``max_batch`` requests run
    (``rollout.speculative.max_batch``)."""
    drafter = worker.model_runner.drafter
    drafter.propose = TailGate(drafter.propose, max_batch)


class TailGate:
    """A drafter's ``propose`` that drafts nothing while more than ``max_batch`` rows run: a full batch's
    decode step is compute-bound and verifying drafts only adds work; in the tail (few long requests) it is
    latency-bound and drafts pay. Rows without a draft decode as without speculation. vLLM passes the rows'
    sampled tokens as the one list argument (ngram's ``propose`` takes the draft length before it)."""

    def __init__(self, propose: Callable[..., list[list[int]]], max_batch: int) -> None:
        self.propose, self.max_batch = propose, max_batch

    def __call__(self, *args: Any, **kwargs: Any) -> list[list[int]]:
        rows = next(a for a in args if isinstance(a, list))
        if len(rows) > self.max_batch:
            return [[] for _ in rows]
        return self.propose(*args, **kwargs)


class GroupProposer:
    """A vLLM custom proposer: each row's draft from its own prompt's earlier samples (``GroupDrafts``)."""

    def __init__(self, vllm_config: Any) -> None:
        self.k = int(vllm_config.speculative_config.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.drafts: GroupDrafts | None = None
        self.runner: Any = None

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """No draft model."""

    def propose(
        self,
        sampled_token_ids: list[list[int]],
        num_tokens_no_spec: np.ndarray,
        token_ids_cpu: np.ndarray,
        slot_mappings: Any = None,
    ) -> list[list[int]]:
        """One draft per batch row ([] for rows that sampled nothing this step or have no room left)."""
        if self.drafts is None or self.runner is None:  # vLLM's warm-up, before ``attach``
            return [[] for _ in sampled_token_ids]
        batch, requests = self.runner.input_batch, self.runner.requests
        out: list[list[int]] = []
        for row, sampled in enumerate(sampled_token_ids):
            n = int(num_tokens_no_spec[row])
            state = requests[batch.req_ids[row]]
            prompt = state.prompt_token_ids
            # a verify step yields accepted + 1 tokens: no draft past the model length or the request's budget
            room = min(self.k, self.max_model_len - n - 1)
            budget = getattr(state.sampling_params, "max_tokens", None)
            if budget is not None:
                room = min(room, len(prompt) + int(budget) - n - 1)
            if not sampled or room < 1:
                out.append([])
                continue
            out.append(self.drafts.propose(prompt, token_ids_cpu[row, :n].tolist(), room))
        return out


class DraftTally:
    """Each request's draft counts, taken from vLLM's scheduler as it verifies drafts.

    vLLM 0.24 (the GPU kit's release, and CI's) reports speculative decoding only as engine-wide counters; its
    scheduler sees each request's verify step in ``make_spec_decoding_stats(..., request_id=...)`` (called
    for every request whose draft was scored, whether or not stats are logged). Wrapping that method of the
    in-process scheduler keeps per-request counts: verify steps with a draft, draft tokens proposed (less
    those vLLM marked invalid) and accepted. Keys are vLLM's internal request ids (``add_request`` returns
    them)."""

    def __init__(self, scheduler: Any) -> None:
        self.counts: dict[str, DraftCounts] = {}
        observe = scheduler.make_spec_decoding_stats

        def record(
            spec_decoding_stats: Any,
            num_draft_tokens: int,
            num_accepted_tokens: int,
            num_invalid_spec_tokens: dict[str, int] | None,
            request_id: str,
        ) -> Any:
            proposed = num_draft_tokens - (num_invalid_spec_tokens or {}).get(request_id, 0)
            if num_draft_tokens:
                seen = self.counts.get(request_id, DraftCounts(0, 0, 0))
                self.counts[request_id] = seen + DraftCounts(1, proposed, num_accepted_tokens)
            return observe(
                spec_decoding_stats,
                num_draft_tokens=num_draft_tokens,
                num_accepted_tokens=num_accepted_tokens,
                num_invalid_spec_tokens=num_invalid_spec_tokens,
                request_id=request_id,
            )

        scheduler.make_spec_decoding_stats = record

    def pop(self, request_id: str) -> DraftCounts:
        """A finished request's counts (zeros when no draft of it was verified), forgotten here."""
        return self.counts.pop(request_id, DraftCounts(0, 0, 0))

    def forget(self, request_ids: Iterable[str]) -> None:
        """Drop aborted requests' counts."""
        for r in request_ids:
            self.counts.pop(r, None)
