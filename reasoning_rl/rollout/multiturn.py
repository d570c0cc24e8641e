"""Multi-turn rollouts with tools over any engine (``ToolLoop``: a state machine over submit / advance).

Each trajectory generates until a tool call (the format's stop strings), EOS or its token budget; the call runs on
the loop's event-loop thread (the python tool on its own thread pool) while the engine keeps generating for every
other trajectory, so there is no batch-wide barrier per turn. The response is the exact concatenation of the ids
the engine produced and the ids of the inserted tool turns (never a re-tokenisation of decoded text), with
``mask`` 1 on model tokens and 0 on tool or template tokens, and the engine's log-probs on model tokens (0.0,
masked, elsewhere); every token carries the policy version that sampled it (a tool token: its call's).
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Literal

from reasoning_rl.rollout.base import (
    Completion,
    ContinuousEngine,
    Delta,
    DraftCounts,
    Request,
    RolloutEngine,
    SamplingConfig,
)
from reasoning_rl.rollout.tool_calls import FormatName, Tokenizer, ToolCall, make_format
from reasoning_rl.tools.base import Tool, ToolResult, ToolTurn

FinishReason = Literal["stop", "length", "max_turns", "error"]


@dataclass(frozen=True)
class ToolRolloutConfig:
    """``max_turns``: tool calls per trajectory (a further call ends it with ``max_turns``); ``max_tokens``: the
    whole response (model + tool tokens; prompt + ``max_tokens`` must fit the engine's ``max_model_len``);
    ``sampling.max_tokens`` caps one generation call. A set ``sampling.seed`` makes the rollout reproducible:
    each generate call of each trajectory gets its own seed from (seed, prompt, sample, call number), passed as
    ``SamplingConfig.prompt_seeds``, so a trajectory's randomness never depends on which others shared its wave
    (which depends on tool timing)."""

    format: FormatName = "fenced"
    max_turns: int = 4
    max_tokens: int = 1024
    tool_budget_s: float = 10.0
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def __post_init__(self) -> None:
        if self.max_turns < 0 or self.max_tokens < 1 or self.tool_budget_s <= 0:
            raise ValueError("ToolRolloutConfig: max_turns must be >= 0, max_tokens >= 1, tool_budget_s > 0")
        if self.sampling.n != 1:
            raise ValueError("ToolRolloutConfig.sampling.n must be 1; pass n= to run_tool_rollouts instead")


@dataclass
class ToolTrajectory:
    prompt_index: int
    sample_index: int
    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)  # 1 = model token (trained on), 0 = tool/template token
    logprobs: list[float] = field(default_factory=list)
    turns: list[ToolTurn] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    error: str = (
        ""  # set with finish_reason "error": our infrastructure failed; the sample must not be scored
    )
    _segment_start: int = (
        0  # index in token_ids where the current model segment (since the last tool turn) starts
    )
    generate_calls: int = 0
    drafts: DraftCounts | None = None  # rollout.speculative: summed over the model's segments
    seed: int | None = None  # its calls' seeds: call c samples with (seed + c) mod 2**31 (None: the engine's)
    versions: list[int] = field(default_factory=list)  # the policy version of each token

    def completion(self, tokenizer: Tokenizer) -> Completion:
        """The trajectory as the engine-neutral record the trainer trains on (``mask``, ``turns``, ``error``)."""
        return Completion(
            self.prompt_index,
            self.sample_index,
            list(self.prompt_ids),
            list(self.token_ids),
            list(self.logprobs),
            tokenizer.decode(self.token_ids, skip_special_tokens=True),
            self.finish_reason or "error",
            mask=list(self.mask),
            turns=list(self.turns),
            error=self.error,
            versions=list(self.versions),
            drafts=self.drafts,
        )

    def add(self, ids: list[int], logprobs: list[float] | None, versions: list[int]) -> None:
        self.token_ids += ids
        self.mask += [1 if logprobs is not None else 0] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.versions += versions


async def run_tool_rollouts(
    engine: RolloutEngine | ContinuousEngine,
    prompts: list[list[int]],
    tools: Mapping[str, Tool],
    tokenizer: Tokenizer,
    config: ToolRolloutConfig,
    *,
    n: int = 1,
    on_finish: Callable[[ToolTrajectory], None] | None = None,
) -> list[ToolTrajectory]:
    """``n`` trajectories per prompt, ordered by (prompt_index, sample_index): the ``ToolLoop`` over the engine
    (one that only generates runs as ``as_continuous``), on a worker thread so the caller's event loop stays
    free. ``on_finish`` is called once per trajectory the moment it is finished."""
    from reasoning_rl.rollout.stepped import as_continuous

    stepped = as_continuous(engine)
    base = config.sampling.seed
    trajs = [
        ToolTrajectory(i, j, list(p), seed=None if base is None else trajectory_seed(base, i, j, 0))
        for i, p in enumerate(prompts)
        for j in range(n)
    ]

    def drive() -> None:
        with ToolLoop(tools, tokenizer, config) as loop:
            for t in trajs:
                loop.start(t)
            while loop.unfinished():
                stepped.submit(loop.requests())
                if loop.live:  # requests in the engine (running or still waiting: not the engine's running())
                    for delta in stepped.advance():
                        loop.take(delta)
                loop.poll(0.0 if loop.live or loop.ready else None)
                for t in loop.pop_finished():
                    if on_finish is not None:
                        on_finish(t)

    await asyncio.to_thread(drive)
    return trajs


class ToolLoop:
    """The multi-turn tool loop as a state machine over a ``ContinuousEngine``'s submit / advance: each
    trajectory generates until a tool call (the format's stop strings), EOS or its budget; a call runs on the
    loop's own event-loop thread (off the engine's thread) while the engine goes on with the others; its
    result is appended and the continuation submitted. The driver (``run_tool_rollouts``, the trainer's
    frontier) submits ``requests()``, feeds every delta of the loop's requests to ``take`` and calls ``poll``
    for tool results; every trajectory is changed on the driver's thread only. ``drop`` forgets unfinished
    trajectories (a weight swap that parks the engine, a resume): they restart from their prompt with the same
    seeds, so the restart samples what the first attempt would have."""

    def __init__(self, tools: Mapping[str, Tool], tokenizer: Tokenizer, config: ToolRolloutConfig) -> None:
        self.tools, self.tok, self.cfg = tools, tokenizer, config
        self.fmt = make_format(config.format)
        self.stop = tuple(dict.fromkeys((*config.sampling.stop, *self.fmt.stop)))
        self.run_id = uuid.uuid4().hex[:12]
        self.ready: list[ToolTrajectory] = []  # to submit (in the order they became ready)
        self.live: dict[str, ToolTrajectory] = {}  # request id -> trajectory generating in the engine
        self.calls: dict[Future[ToolResult], tuple[ToolTrajectory, ToolCall, float]] = {}
        self.active: set[int] = set()  # id() of the trajectories started and not finished or dropped
        self.finished: list[ToolTrajectory] = []
        self._segment: dict[int, _Segment] = {}  # id(traj) -> the tokens of its request in the engine
        self._rid = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tool-loop", daemon=True)
        self._thread.start()

    def __enter__(self) -> ToolLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------------------------------- driving
    def start(self, t: ToolTrajectory) -> None:
        """Admit a trajectory: its first generate call is in the next ``requests()``."""
        self.active.add(id(t))
        self.ready.append(t)

    def unfinished(self) -> bool:
        return bool(self.active)

    def requests(self) -> list[Request]:
        """The ready trajectories' next generate calls (each its own seed: a function of the trajectory and
        its call number alone, never of what else is in the engine)."""
        out = []
        for t in self.ready:
            t.generate_calls += 1
            cap = min(self.cfg.sampling.max_tokens, self.cfg.max_tokens - len(t.token_ids))
            sampling = self.cfg.sampling.model_copy(
                update={"max_tokens": cap, "stop": list(self.stop), "seed": None, "prompt_offset": 0}
            )
            self._rid += 1
            rid = f"rrl-t{self._rid}"
            self.live[rid] = t
            self._segment[id(t)] = _Segment()
            seed = None if t.seed is None else (t.seed + t.generate_calls) % (1 << 31)
            out.append(Request(rid, t.prompt_ids + t.token_ids, sampling, seed, group=t.prompt_index))
        self.ready = []
        return out

    def owns(self, rid: str) -> bool:
        return rid in self.live

    def take(self, delta: Delta) -> None:
        """A delta of one of the loop's requests; its finishing one ends the generate call."""
        t = self.live[delta.id]
        seg = self._segment[id(t)]
        seg.token_ids += delta.token_ids
        seg.logprobs += delta.logprobs or [0.0] * len(delta.token_ids)
        seg.versions += delta.token_versions()
        if delta.drafts is not None:
            seg.drafts = delta.drafts
        if delta.finished:
            del self.live[delta.id]
            self._after_generate(t, self._segment.pop(id(t)), delta.finish_reason)

    def poll(self, timeout: float | None) -> None:
        """Take the tool calls that finished, waiting up to ``timeout`` s for one (None: until one does)."""
        if not self.calls:
            return
        done, _ = wait(list(self.calls), timeout=timeout, return_when=FIRST_COMPLETED)
        for future in [f for f in self.calls if f in done]:
            t, call, started = self.calls.pop(future)
            if id(t) in self.active:  # not dropped meanwhile
                self._after_call(t, call, started, future.result())

    def pop_finished(self) -> list[ToolTrajectory]:
        out, self.finished = self.finished, []
        return out

    def drop(self) -> tuple[list[str], list[ToolTrajectory]]:
        """Forget every unfinished trajectory (their sessions end, their tool calls are ignored): the request
        ids to abort in the engine and the trajectories, to restart from their prompts."""
        ids = list(self.live)
        seen: dict[int, ToolTrajectory] = {id(t): t for t in self.ready}
        seen.update({id(t): t for t in self.live.values()})
        seen.update({id(t): t for t, _, _ in self.calls.values()})
        dropped = [t for t in seen.values() if id(t) in self.active]
        for t in dropped:
            self.active.discard(id(t))
            self._end_sessions(t)
        self.ready, self.live, self.calls, self._segment = [], {}, {}, {}
        return ids, dropped

    def close(self) -> None:
        """End every session and stop the loop's thread."""
        self.drop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    # ---------------------------------------------------------------------------------------- the turn
    def _after_generate(self, t: ToolTrajectory, seg: _Segment, reason: str) -> None:
        # a prompt that ends inside a call (e.g. an open ```python block) lends its tail to the first segment
        lead = self.fmt.open_call(self.tok.decode(t.prompt_ids)) if t._segment_start == 0 else ""
        before = len(lead + self.tok.decode(t.token_ids[t._segment_start :], skip_special_tokens=False))
        t.add(seg.token_ids, seg.logprobs, seg.versions)
        if seg.drafts is not None:
            t.drafts = seg.drafts if t.drafts is None else t.drafts + seg.drafts
        text = lead + self.tok.decode(t.token_ids[t._segment_start :], skip_special_tokens=False)
        call = self.fmt.find(text)
        if call is not None and call.end > before:
            if len(t.turns) >= self.cfg.max_turns:
                self._finish(t, "max_turns")
            else:
                future = asyncio.run_coroutine_threadsafe(self._execute(t, call), self._loop)
                self.calls[future] = (t, call, time.time())
            return
        if len(t.token_ids) >= self.cfg.max_tokens:
            self._finish(t, "length")
        elif reason == "length" or any(s in text[before:] for s in self.stop):
            self.ready.append(t)  # the per-call cap, or a stop string that was no call (another fenced block)
        else:
            self._finish(t, "stop")  # EOS

    def _after_call(self, t: ToolTrajectory, call: ToolCall, started: float, result: ToolResult) -> None:
        t.turns.append(ToolTurn(call.name, call.arguments, result, started))
        if result.status == "infra_error":
            self._finish(t, "error", f"tool {call.name}: {result.detail or result.text}")
            return
        try:
            ids = self.fmt.tool_turn(result.text, self.tok)
        except Exception as exc:  # noqa: BLE001 - e.g. a chat template that cannot render a tool turn
            self._finish(t, "error", f"tool turn for {call.name}: {type(exc).__name__}: {exc}")
            return
        if len(t.token_ids) + len(ids) >= self.cfg.max_tokens:
            self._finish(t, "length")
            return
        t.add(ids, None, [t.versions[-1] if t.versions else 0] * len(ids))
        t._segment_start = len(t.token_ids)
        self.ready.append(t)

    async def _execute(self, t: ToolTrajectory, call: ToolCall) -> ToolResult:
        if call.error:
            return ToolResult(f"Error: {call.error}", "invalid_call")
        tool = self.tools.get(call.name)
        if tool is None:
            return ToolResult(
                f"Error: unknown tool {call.name!r}; available: {', '.join(sorted(self.tools))}",
                "invalid_call",
            )
        try:
            return await tool.call(call.arguments, session=self._session(t), budget_s=self.cfg.tool_budget_s)
        except Exception as exc:  # noqa: BLE001 - a tool that raises is broken infrastructure: the sample is `error`
            return ToolResult("Error: the tool failed", "infra_error", detail=f"{type(exc).__name__}: {exc}")

    def _finish(self, t: ToolTrajectory, reason: FinishReason, error: str = "") -> None:
        t.finish_reason, t.error = reason, error
        self.active.discard(id(t))
        self._end_sessions(t)
        self.finished.append(t)

    def _session(self, t: ToolTrajectory) -> str:
        return f"{self.run_id}/{t.prompt_index}/{t.sample_index}"

    def _end_sessions(self, t: ToolTrajectory) -> None:
        """Free per-trajectory tool state (the python tool's cells), on the tools' own event loop."""
        for tool in self.tools.values():
            self._loop.call_soon_threadsafe(tool.end_session, self._session(t))


@dataclass
class _Segment:
    """What one generate call of a trajectory has produced so far."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    drafts: DraftCounts | None = None


def trajectory_seed(base: int, prompt_index: int, sample_index: int, call: int) -> int:
    """The sampling seed of a trajectory's ``call``-th generate call (1-based), within 31 bits."""
    return (base * 1_000_003 + prompt_index * 100_003 + sample_index * 1_009 + call) % (1 << 31)


def tool_stats(trajs: list[ToolTrajectory]) -> dict[str, float]:
    """Calls, errors by kind, latency p50/p99 (s) and turns per trajectory, for logs and the bench."""
    turns = [turn for t in trajs for turn in t.turns]
    lat = sorted(turn.result.latency_s for turn in turns)
    stats: dict[str, float] = {
        "tool_calls": len(turns),
        "tool_errors": sum(turn.result.status not in ("ok", "infra_error") for turn in turns),
        "tool_infra_errors": sum(turn.result.status == "infra_error" for turn in turns),
        "turns_per_trajectory": len(turns) / max(len(trajs), 1),
        "samples_error": sum(t.finish_reason == "error" for t in trajs),
    }
    if lat:
        stats["tool_latency_p50_s"] = statistics.median(lat)
        stats["tool_latency_p99_s"] = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    return stats
