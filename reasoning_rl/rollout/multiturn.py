"""Multi-turn rollouts with tools around any ``RolloutEngine``.

Each trajectory generates until a tool call (the format's stop strings), EOS or its token budget; the call runs
as an asyncio task (the python tool on its own thread pool) while the engine keeps generating for every other
trajectory: each wave batches all trajectories that are ready into one ``generate`` call, so there is no
batch-wide barrier per turn. The response is the exact concatenation of the ids the engine produced and the ids of
the inserted tool turns (never a re-tokenisation of decoded text), with ``mask`` 1 on model tokens and 0 on tool
or template tokens, and the engine's log-probs on model tokens (0.0, masked, elsewhere).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from reasoning_rl.rollout.base import Completion, DraftCounts, RolloutEngine, SamplingConfig
from reasoning_rl.rollout.tool_calls import CallFormat, FormatName, Tokenizer, ToolCall, make_format
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
            drafts=self.drafts,
        )

    def add(self, ids: list[int], logprobs: list[float] | None) -> None:
        self.token_ids += ids
        self.mask += [1 if logprobs is not None else 0] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)


async def run_tool_rollouts(
    engine: RolloutEngine,
    prompts: list[list[int]],
    tools: Mapping[str, Tool],
    tokenizer: Tokenizer,
    config: ToolRolloutConfig,
    *,
    n: int = 1,
    on_finish: Callable[[ToolTrajectory], None] | None = None,
) -> list[ToolTrajectory]:
    """``n`` trajectories per prompt, ordered by (prompt_index, sample_index). ``on_finish`` is called (on the
    event loop) once per trajectory the moment it is finished, so grading can overlap the others' turns."""
    fmt = make_format(config.format)
    trajs = [ToolTrajectory(i, j, list(p)) for i, p in enumerate(prompts) for j in range(n)]
    run = _Run(engine, tools, tokenizer, config, fmt, on_finish)
    await run.drive(trajs)
    return trajs


class _Run:
    def __init__(
        self,
        engine: RolloutEngine,
        tools: Mapping[str, Tool],
        tokenizer: Tokenizer,
        config: ToolRolloutConfig,
        fmt: CallFormat,
        on_finish: Callable[[ToolTrajectory], None] | None = None,
    ) -> None:
        self.engine, self.tools, self.tok, self.cfg, self.fmt = engine, tools, tokenizer, config, fmt
        self.on_finish = on_finish
        self.finished: set[int] = set()
        self.stop = tuple(dict.fromkeys((*config.sampling.stop, *fmt.stop)))
        self.run_id = uuid.uuid4().hex[:12]
        self.ready: list[ToolTrajectory] = []
        self.wake = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()

    async def drive(self, trajs: list[ToolTrajectory]) -> None:
        self.ready = list(trajs)
        loop = asyncio.get_running_loop()
        try:
            with ThreadPoolExecutor(
                1, thread_name_prefix="rollout-engine"
            ) as gen:  # the engine is not thread-safe
                while any(t.finish_reason is None for t in trajs):
                    if not self.ready:
                        await self.wake.wait()
                        self.wake.clear()
                        continue
                    wave, self.ready = self.ready, []
                    for cap, group in _by_cap(wave, self.cfg).items():
                        sampling = self.cfg.sampling.model_copy(
                            update={
                                "max_tokens": cap,
                                "stop": list(self.stop),
                                "prompt_seeds": self._seeds(group),
                            }
                        )
                        contexts = [t.prompt_ids + t.token_ids for t in group]
                        completions = await loop.run_in_executor(
                            gen, self.engine.generate, contexts, sampling
                        )
                        for t, c in zip(group, completions, strict=True):
                            self._after_generate(t, c)
        finally:  # normally every session has ended already; not after an engine failure
            for task in list(self.tasks):
                task.cancel()
            for t in trajs:
                self._end_sessions(t)

    def _seeds(self, group: list[ToolTrajectory]) -> tuple[int, ...] | None:
        """One seed per trajectory and call: a function of the trajectory alone, never of its wave."""
        base = self.cfg.sampling.seed
        for t in group:
            t.generate_calls += 1
        if base is None:
            return None
        return tuple(trajectory_seed(base, t.prompt_index, t.sample_index, t.generate_calls) for t in group)

    def _after_generate(self, t: ToolTrajectory, c: Completion) -> None:
        # a prompt that ends inside a call (e.g. an open ```python block) lends its tail to the first segment
        lead = self.fmt.open_call(self.tok.decode(t.prompt_ids)) if t._segment_start == 0 else ""
        before = len(lead + self.tok.decode(t.token_ids[t._segment_start :], skip_special_tokens=False))
        t.add(list(c.token_ids), list(c.logprobs) if c.logprobs else [0.0] * len(c.token_ids))
        if c.drafts is not None:
            t.drafts = c.drafts if t.drafts is None else t.drafts + c.drafts
        text = lead + self.tok.decode(t.token_ids[t._segment_start :], skip_special_tokens=False)
        call = self.fmt.find(text)
        if call is not None and call.end > before:
            if len(t.turns) >= self.cfg.max_turns:
                t.finish_reason = "max_turns"
                self._end_sessions(t)
            else:
                task = asyncio.create_task(self._call(t, call))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            return
        if len(t.token_ids) >= self.cfg.max_tokens:
            t.finish_reason = "length"
        elif c.finish_reason == "length" or any(s in text[before:] for s in self.stop):
            self.ready.append(t)  # the per-call cap, or a stop string that was no call (another fenced block)
        else:
            t.finish_reason = "stop"  # EOS
        if t.finish_reason is not None:
            self._end_sessions(t)

    async def _call(self, t: ToolTrajectory, call: ToolCall) -> None:
        try:
            started = time.time()
            result = await self._execute(t, call)
            t.turns.append(ToolTurn(call.name, call.arguments, result, started))
            if result.status == "infra_error":
                t.finish_reason, t.error = "error", f"tool {call.name}: {result.detail or result.text}"
                return
            ids = self.fmt.tool_turn(result.text, self.tok)
            if len(t.token_ids) + len(ids) >= self.cfg.max_tokens:
                t.finish_reason = "length"
                return
            t.add(ids, None)
            t._segment_start = len(t.token_ids)
            self.ready.append(t)
        except Exception as exc:  # noqa: BLE001 - e.g. a chat template that cannot render a tool turn
            t.finish_reason, t.error = "error", f"tool turn for {call.name}: {type(exc).__name__}: {exc}"
        finally:
            self.wake.set()  # first: the generation loop must go on even if ending the sessions fails
            if t.finish_reason is not None:
                self._end_sessions(t)

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

    def _session(self, t: ToolTrajectory) -> str:
        return f"{self.run_id}/{t.prompt_index}/{t.sample_index}"

    def _end_sessions(self, t: ToolTrajectory) -> None:
        """Free per-trajectory tool state (the python tool's cells) as soon as the trajectory is finished,
        and report it finished (once)."""
        for tool in self.tools.values():
            tool.end_session(self._session(t))
        if t.finish_reason is not None and id(t) not in self.finished:
            self.finished.add(id(t))
            if self.on_finish is not None:
                self.on_finish(t)


def trajectory_seed(base: int, prompt_index: int, sample_index: int, call: int) -> int:
    """The sampling seed of a trajectory's ``call``-th generate call (1-based), within 31 bits."""
    return (base * 1_000_003 + prompt_index * 100_003 + sample_index * 1_009 + call) % (1 << 31)


def _by_cap(wave: list[ToolTrajectory], cfg: ToolRolloutConfig) -> dict[int, list[ToolTrajectory]]:
    """Group by per-call token cap (a trajectory may not overrun its remaining budget)."""
    groups: dict[int, list[ToolTrajectory]] = {}
    for t in wave:
        cap = min(cfg.sampling.max_tokens, cfg.max_tokens - len(t.token_ids))
        groups.setdefault(cap, []).append(t)
    return groups


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
