"""What vLLM sampled for our continuous requests, taken from each engine step's core outputs (issue 44): the
token count in the step that sampled them, and a whole request's log-probs without vLLM's per-token objects.

A continuous request submitted with ``deltas=False`` (vLLM's FINAL_ONLY) reports its tokens once, at its end, so
its outputs cannot say which step sampled them: the per-step generation figures (``rollout/generated_tokens``,
gen tok/s, a split rank's ``overlap_tokens``) would count a request's tokens in the step it finishes. vLLM 0.24's
in-process engine core client (``InprocClient.get_output``, what ``LLMEngine.step`` calls first) returns every
step's ``EngineCoreOutputs``: one ``EngineCoreOutput`` per request that got new tokens, with their ids, before the
output processor holds them back. Wrapping that method of the engine's client counts them, for the tracked
requests only (not a stream's or a score's), at one set lookup per output per step (no new object per request).

Log-probs: continuous runs need each sampled token's log-prob (decoupled PPO's behaviour policy). vLLM's output
processor turns every request's log-probs of every step into Python objects (three ``tolist`` calls and a
per-position container): ``bench/engine_step.py`` at 512 requests on CPU, a step with log-probs cost 1.288x one
without (1.154x with them kept here), and on the H200's host continuous ran 28-31 us per request-step against
sync's 21 (bench/RESULTS.md, 2026-12-07). For a tracked
whole request that asked for them, the wrapper keeps the step's sampled-token column as the numpy array vLLM
already made and hands the output processor none; ``kept`` joins them once, when the request finishes or a
park/checkpoint reads it. Requests reporting every step (``deltas=True``) keep vLLM's own path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from reasoning_rl.rollout.base import RolloutError


class StepTokens:
    """A running count of the tokens the engine core sampled for the tracked requests (vLLM's internal ids), and
    the sampled tokens' log-probs of those tracked with ``logprobs=True``."""

    def __init__(self, llm_engine: Any) -> None:
        client: Any = getattr(llm_engine, "engine_core", None)
        if not callable(getattr(client, "get_output", None)):
            raise RolloutError(
                "the vLLM engine has no in-process engine core client (engine_core.get_output) to count each "
                "step's sampled tokens; VLLMEngine needs vLLM's V1 engine with VLLM_ENABLE_V1_MULTIPROCESSING=0"
            )
        self.total = 0
        self._tracked: set[str] = set()
        self._kept: dict[str, list[Any]] = {}  # internal id -> each step's sampled-token log-probs (numpy)
        get_output = client.get_output

        def counted() -> Any:
            outs = get_output()
            if self._tracked:
                tracked, kept = self._tracked, self._kept
                for o in outs.outputs:
                    if o.request_id in tracked:
                        self.total += len(o.new_token_ids)
                        if o.new_logprobs is not None and o.request_id in kept:
                            kept[o.request_id].append(o.new_logprobs.logprobs[:, 0])
                            o.new_logprobs = None
            return outs

        client.get_output = counted

    def track(self, internal_id: str, *, logprobs: bool = False) -> None:
        """Count this request's tokens from now on; ``logprobs``: keep its log-probs here (read by ``kept``),
        not in vLLM's output."""
        self._tracked.add(internal_id)
        if logprobs:
            self._kept[internal_id] = []

    def kept(self, internal_id: str, n_tokens: int) -> list[float] | None:
        """The log-probs of the request's ``n_tokens`` sampled tokens so far, in order, if kept here (None: vLLM's
        output carries them)."""
        parts = self._kept.get(internal_id)
        if parts is None:
            return None
        got = [float(x) for x in np.concatenate(parts).tolist()] if parts else []
        if len(got) != n_tokens:
            raise RolloutError(
                f"vLLM request {internal_id}: {len(got)} log-probs kept for {n_tokens} sampled tokens "
                "(an engine step's output was missed)"
            )
        return got

    def forget(self, internal_ids: Iterable[str]) -> None:
        """Finished or aborted requests: no more outputs of theirs to look up."""
        for i in internal_ids:
            self._tracked.discard(i)
            self._kept.pop(i, None)
