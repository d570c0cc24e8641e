"""The tokens vLLM sampled for our continuous requests, counted in the engine step that sampled them (issue 44).

A continuous request submitted with ``deltas=False`` (vLLM's FINAL_ONLY) reports its tokens once, at its end, so
its outputs cannot say which step sampled them: the per-step generation figures (``rollout/generated_tokens``,
gen tok/s, a split rank's ``overlap_tokens``) would count a request's tokens in the step it finishes. vLLM 0.24's
in-process engine core client (``InprocClient.get_output``, what ``LLMEngine.step`` calls first) returns every
step's ``EngineCoreOutputs``: one ``EngineCoreOutput`` per request that got new tokens, with their ids, before the
output processor holds them back. Wrapping that method of the engine's client counts them, for the tracked
requests only (not a stream's or a score's), at one set lookup per output per step (no new object per request).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reasoning_rl.rollout.base import RolloutError


class StepTokens:
    """A running count of the tokens the engine core sampled for the tracked requests (vLLM's internal ids)."""

    def __init__(self, llm_engine: Any) -> None:
        client: Any = getattr(llm_engine, "engine_core", None)
        if not callable(getattr(client, "get_output", None)):
            raise RolloutError(
                "the vLLM engine has no in-process engine core client (engine_core.get_output) to count each "
                "step's sampled tokens; VLLMEngine needs vLLM's V1 engine with VLLM_ENABLE_V1_MULTIPROCESSING=0"
            )
        self.total = 0
        self._tracked: set[str] = set()
        get_output = client.get_output

        def counted() -> Any:
            outs = get_output()
            if self._tracked:
                tracked = self._tracked
                self.total += sum(len(o.new_token_ids) for o in outs.outputs if o.request_id in tracked)
            return outs

        client.get_output = counted

    def track(self, internal_id: str) -> None:
        """Count this request's tokens from now on."""
        self._tracked.add(internal_id)

    def forget(self, internal_ids: Iterable[str]) -> None:
        """Finished or aborted requests: no more outputs of theirs to look up."""
        self._tracked.difference_update(internal_ids)
