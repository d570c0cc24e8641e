"""The rollout frontier of a run on an in-process engine (issue 31): the groups admitted to the engine, their
partial and finished samples, and which ``B`` finished groups each step trains (``StalenessSchedule``).

The engine keeps ``rollout.running_groups`` groups generating (prompts drawn from the run's ``PromptSampler``):
one is admitted whenever another finishes and frees its slot, at the step's start and after every ``advance``,
while at most ``B x (1 + rollout.max_lag)`` are untrained (the staleness bound). A step steps the engine until
the schedule can pick ``B`` finished groups (graded as each sample finishes, the way ``collect`` does), and
returns them as the step's ``Rollouts``. The others stay in the engine: not stepping
it during the update and the hand-off is pausing it, and they continue with the new weights. Every token
carries the policy version that sampled it (``Completion.versions``) next to its behaviour log-prob: the
engine's own record (a request reports once, when it finishes, its tokens' versions from the spans the engine
noted at each swap; what an unfinished one has is read from the engine only for a park or a checkpoint). The
step's version is the engine's too (``engine.version``), checked against the trainer's count of updates, never
computed in its place.

Where the engine sleeps for the update (its memory is the trainer's), ``park`` stops the unfinished requests
first and the next step resubmits each as its prompt plus its partial tokens (one prefill): the path taken is
logged once. A resumed run takes the same path from the checkpoint's ``state()``: finished-untrained samples
are graded again (the grade cache makes that cheap), partial ones resubmitted, so no prompt is lost or drawn
twice. ``max_lag = 0`` is the synchronous step: ``B`` groups admitted and all of them trained.

Dynamic sampling (``algorithm.dynamic_sampling``) is reject-and-admit here (``trainer/rejection``): a group is
ready for the schedule once graded, and one without reward spread is rejected and another prompt admitted in
its room, so a step still trains ``B`` groups, at any ``max_lag``.

Prefix-cache safety is the engine's: it salts every request it admits with the weights it holds, so a
request admitted after a hand-off never hits blocks computed with older weights (vLLM refuses a prefix-cache
reset while requests are running).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from graders.runtime import GradingPool
from reasoning_rl.data import Prompt, PromptSampler
from reasoning_rl.faults import fault_point
from reasoning_rl.rollout import Completion, ContinuousEngine, Delta, DraftCounts, Request, SamplingConfig
from reasoning_rl.step_cost import StepCost
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.collect import RewardPlan, StreamGrading
from reasoning_rl.trainer.producers import ToolTurns
from reasoning_rl.trainer.records import Rollouts
from reasoning_rl.trainer.rejection import RejectAndAdmit, informative
from reasoning_rl.trainer.staleness import StalenessSchedule
from reasoning_rl.trainer.tool_collect import trace_tools

FULL_SHARE = 0.8  # "the engine runs full": running batch >= this share of the target (running_groups x n)
GENERATED_TOKENS = "rollout/generated_tokens"  # the step's metric: tokens the engine produced in its window
RUNNING_SAMPLE_S = 0.1  # how often the running batch goes to the trace


@dataclass
class Group:
    """An admitted prompt: its dataset index and uid, the version it was admitted at, its seed (sample j:
    seed + j) and its place among the groups admitted with it (``SamplingConfig.prompt_offset``: an engine
    that seeds per prompt, the hf one, then samples as one batched request of those groups would)."""

    ticket: int
    prompt_index: int
    uid: str
    version: int
    seed: int | None
    offset: int = 0


@dataclass
class Partial:
    """One sample in the engine: what it has generated so far, each token's version and behaviour log-prob."""

    ticket: int
    sample: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    text: str = ""
    cached_tokens: int | None = None  # prompt tokens its (last) submission found in the prefix cache


class Frontier:
    """The in-flight rollouts across steps; ``next_batch`` is a step's generate + grade."""

    def __init__(
        self,
        engine: ContinuousEngine,
        pool: GradingPool,
        prompts: list[Prompt],
        rewards: RewardPlan,
        sampler: PromptSampler,
        *,
        batch: int,
        max_lag: int,
        running_groups: int | None = None,
        sampling: Callable[[int], SamplingConfig],
        seed_for_step: Callable[[int], int],
        tokenizer: Any,
        resident: bool,
        rejection: RejectAndAdmit | None = None,
        tools: ToolTurns | None = None,
        prefix: str = "rrl-c",
    ) -> None:
        self.engine = engine
        self.prompts = prompts
        self.sampler = sampler
        # None: one batch generating (rollout.running_groups' default)
        self.schedule = StalenessSchedule(batch, max_lag, batch if running_groups is None else running_groups)
        self.sampling = sampling  # seed -> the run's request (rollout.*, log-probs as the plan needs)
        self.seed_for_step = seed_for_step
        self.tokenizer = tokenizer
        self.resident = resident  # False: the engine sleeps for the update; park and resubmit
        self.groups: dict[int, Group] = {}
        self.live: dict[str, Partial] = {}
        self.waiting: list[Partial] = []  # parked (or restored) partial samples, resubmitted at the next step
        self.done: dict[int, int] = {}  # ticket -> finished samples
        self.grading = StreamGrading(pool, _Tickets(self), rewards)
        self.resubmitted = 0  # partial samples resubmitted (park / resume) since the last step's metrics
        self.rejection = rejection  # dynamic sampling: groups without reward spread rejected and replaced
        self.judged: dict[int, bool] = {}  # dynamic sampling: finished graded ticket -> has reward spread
        self.tools = tools  # rollout.tools: each sample a multi-turn tool trajectory (trainer/producers)
        self.prefix = prefix  # request ids: a second frontier on the engine (eval) uses its own
        self.cost = StepCost(self.schedule.slots * sampling(0).n)  # per-engine-step cost by running batch
        self._rid = 0
        self._offset = 0  # groups admitted in this step so far (the next group's ``Group.offset``)

    @property
    def path(self) -> str:
        """How unfinished requests cross an update: kept in the engine, or stopped and resubmitted."""
        return "resident" if self.resident else "resubmit"

    # ----------------------------------------------------------------------------------------- a step
    def next_batch(self, step: int, trace: TraceWriter) -> tuple[Rollouts, dict[str, float]]:
        """Step ``step``'s ``B`` graded groups and its rollout metrics, at the version the engine holds (which
        must be the trainer's ``step - 1``: its updates so far)."""
        version = self._engine_version(step)
        t0 = time.time()
        self._offset = 0
        if self.rejection is not None:
            self.rejection.begin()
        self._resubmit()
        self._admit(version, step)
        n = self.sampling(0).n
        target = self.schedule.slots * n  # the running batch admission keeps, in requests
        full = FULL_SHARE * target
        busy = full_s = 0.0
        last_trace = 0.0
        sampled = last_sampled = self.engine.sampled  # this step's window generated what the engine adds
        # samples finished (and graded) in earlier steps but not yet trained count as graded now
        graded_before = self.grading.ever_graded - self.grading.graded()
        need = self.schedule.batch * n

        def progress() -> None:
            trace.progress(
                "generate",
                generated=(min(len(self.grading.completions), need), need),
                graded=(min(self.grading.ever_graded - graded_before, need), need),
            )

        with gc_paused():  # the objects of a step die by reference counting; cycles wait for its end
            while (chosen := self.schedule.select(version, self._ready(version, step))) is None:
                ungraded = len(self.grading.completions) - self.grading.graded()
                if self.tools is not None:
                    if requests := self.tools.requests():
                        self.engine.submit(requests)
                    if not self._in_engine() and self.tools.waiting():
                        self._take_tools(None)  # every trajectory in a tool call: wait for one
                        self._admit(version, step)  # into the slots of the groups that finished
                        continue
                if not self._in_engine() and self.rejection is not None and ungraded:
                    # dynamic sampling waits for the grades that judge a group
                    if not self.grading.poll(None):
                        raise RuntimeError(f"grading pool returned no grade for {ungraded} samples")
                    continue
                if not self._in_engine():
                    raise RuntimeError(
                        "continuous rollouts: waiting for groups with no request in the engine"
                    )
                before, t = self.engine.running(), time.time()
                deltas = self.engine.advance()
                engine_s, after, now_sampled = time.time() - t, self.engine.running(), self.engine.sampled
                for delta in deltas:
                    if self.tools is not None and self.tools.owns(delta.id):
                        self.tools.take(delta)
                    else:
                        self._take(delta)
                if self.tools is not None:
                    self._take_tools(0.0)
                self._admit(version, step)  # into the slots of the groups that finished
                progress()
                fault_point("generate")  # a crash test's mid-generation
                running = self.engine.running()
                dt = time.time() - t
                busy += running * dt
                full_s += dt if running >= full else 0.0
                self.cost.add(max(before, after), dt, engine_s, now_sampled - last_sampled)
                last_sampled = now_sampled
                if t - last_trace >= RUNNING_SAMPLE_S:
                    trace.counter("engine_running", step, running, admitted=self._in_engine(), target=target)
                    last_trace = t
        t1 = time.time()
        graded = self.grading.graded()
        self.grading.wait(progress)
        self.grading.trace(trace, step, t0, t1, time.time(), graded=graded)
        rollouts = self.grading.pop_groups(chosen)
        self.schedule.trained(chosen)
        for t in chosen:
            del self.groups[t], self.done[t]
            self.judged.pop(t, None)
        if self.rejection is not None:
            rollouts = self.rejection.trained(rollouts)
        if self.tools is not None:
            trace_tools(trace, step, (s.completion for s in rollouts))
        gen_s = t1 - t0
        metrics = {
            **self.cost.flush(trace, step),  # the per-engine-step cost curve (trace engine_steps)
            "rollout/running_mean": busy / gen_s if gen_s > 0 else 0.0,
            "rollout/running_full_frac": full_s / gen_s if gen_s > 0 else 0.0,
            "rollout/in_flight": float(len(self.live) + len(self.tools.started if self.tools else ())),
            "rollout/resubmitted": float(self.resubmitted),
            GENERATED_TOKENS: float(self.engine.sampled - sampled),
            **(self.rejection.metrics() if self.rejection is not None else {}),
            **lag_metrics(rollouts, version, trace, step),
        }
        self.resubmitted = 0
        return rollouts, metrics

    def park(self, *, everything: bool = False) -> None:
        """Before the engine sleeps (``everything``: before another frontier uses the engine, eval): stop the
        unfinished requests and keep their partial tokens; a tool trajectory restarts from its prompt with its
        seeds. A no-op when requests stay resident."""
        if self.resident and not everything:
            return
        if self.live:
            ids = list(self.live)
            for got in self.engine.partial(ids):
                _extend(self.live[got.id], got)
            self.engine.abort(ids)
            self.waiting.extend(self.live.values())
            self.live.clear()
        if self.tools is not None:
            ids, keys = self.tools.park()
            self.engine.abort(ids)
            self.waiting.extend(Partial(ticket, sample) for ticket, sample in keys)

    def close(self) -> None:
        """Stop the tool loop's thread (a run's end)."""
        if self.tools is not None:
            self.tools.close()

    def _in_engine(self) -> int:
        """The frontier's requests in the engine now (a tool trajectory's current generate call included)."""
        return len(self.live) + (self.tools.in_engine() if self.tools is not None else 0)

    def _take_tools(self, timeout: float | None) -> None:
        """Finished tool trajectories to grading (tool results waited for up to ``timeout`` s)."""
        assert self.tools is not None
        for comp in self.tools.poll(timeout):
            self.grading.take(comp)
            self.done[comp.prompt_index] += 1

    def _engine_version(self, step: int) -> int:
        """The engine's version; one other than the trainer's updates so far is a missed or misnumbered
        hand-off (a bug), stopped here rather than trained with wrong lags."""
        version = self.engine.version
        if version != step - 1:
            raise RuntimeError(
                f"step {step}: the engine holds policy version {version}, the trainer is at {step - 1} "
                "(a weight hand-off was missed or misnumbered)"
            )
        return version

    # ------------------------------------------------------------------------------------- admission
    def _running(self) -> int:
        """Admitted groups with a sample still unfinished (generating, parked or in a tool call): slots taken."""
        n = self.sampling(0).n
        return sum(1 for k in self.done.values() if k < n)

    def _admit(self, version: int, step: int) -> None:
        """Groups into the free slots, as far as the staleness bound allows (``StalenessSchedule.room``)."""
        room = self.schedule.room(self._running())
        if room < 1:
            return
        seed = self.seed_for_step(step)
        requests = []
        for idx in self.sampler.next_batch(room):
            ticket = self.schedule.admit(version)
            group = Group(ticket, idx, self.prompts[idx].example.uid, version, seed, self._offset)
            self._offset += 1
            self.groups[ticket] = group
            self.done[ticket] = 0
            for j in range(self.sampling(0).n):
                if self.tools is not None:
                    self.tools.start((ticket, j), self.prompts[idx].token_ids, seed, group.offset)
                else:
                    requests.append(self._request(Partial(ticket, j)))
        self.engine.submit(requests + (self.tools.requests() if self.tools is not None else []))

    def _resubmit(self) -> None:
        if not self.waiting:
            return
        if self.tools is not None:  # a tool trajectory restarts from its prompt, with its seeds
            for p in self.waiting:
                g = self.groups[p.ticket]
                self.tools.start(
                    (p.ticket, p.sample), self.prompts[g.prompt_index].token_ids, g.seed, g.offset
                )
        else:
            self.engine.submit([self._request(p) for p in self.waiting])
        self.resubmitted += len(self.waiting)
        self.waiting = []

    def _request(self, part: Partial) -> Request:
        """The request of a sample: its prompt plus what it generated before (a resubmission), the rest of
        the token budget and its seed (the engine salts its prefix cache with the weights it holds)."""
        group = self.groups[part.ticket]
        sampling = self.sampling(0)
        seed = None if group.seed is None else group.seed + part.sample + 7919 * len(part.token_ids)
        left = sampling.max_tokens - len(part.token_ids)
        sampling = sampling.model_copy(update={"max_tokens": left, "prompt_offset": group.offset})
        self._rid += 1
        rid = f"{self.prefix}{self._rid}"
        self.live[rid] = part
        return Request(
            rid,
            list(self.prompts[group.prompt_index].token_ids) + part.token_ids,
            sampling,
            seed,
            deltas=False,  # one output each, at its end; partial tokens read for a park or a checkpoint
            group=part.ticket,
        )

    # ------------------------------------------------------------------------------------ completions
    def _take(self, delta: Delta) -> None:
        part = self.live[delta.id]
        _extend(part, delta)
        if delta.finished:
            del self.live[delta.id]
            self._finish(part, delta.finish_reason, delta.drafts)

    def _finish(self, part: Partial, reason: str, drafts: DraftCounts | None) -> None:
        group = self.groups[part.ticket]
        stop = bool(self.sampling(0).stop)
        text = part.text if stop else self.tokenizer.decode(part.token_ids, skip_special_tokens=True)
        self.grading.take(
            Completion(
                prompt_index=part.ticket,
                sample_index=part.sample,
                prompt_ids=list(self.prompts[group.prompt_index].token_ids),
                token_ids=part.token_ids,
                logprobs=part.logprobs,
                text=text,
                finish_reason=reason,
                versions=part.versions,
                drafts=drafts,  # a resubmitted sample's: those of its last request
            )
        )
        self.done[part.ticket] += 1

    def _finished(self) -> list[int]:
        n = self.sampling(0).n
        return [t for t, k in self.done.items() if k == n]

    def _ready(self, version: int, step: int) -> list[int]:
        """The groups the schedule may pick: the finished ones; under dynamic sampling only once graded, and a
        group without reward spread is rejected while the step's budget lasts, another prompt admitted."""
        finished = self._finished()
        if self.rejection is None:
            return finished
        self.grading.poll(0.0)
        n = self.sampling(0).n
        ready = []
        for t in finished:
            if t not in self.judged:
                samples = self.grading.group(t, n)
                if samples is None:
                    continue  # still grading
                self.judged[t] = informative(samples)
            if self.judged[t] or not self.rejection.may_reject():
                ready.append(t)
            else:
                self._reject(t, self.rejection)
        self._admit(version, step)
        return ready

    def _reject(self, ticket: int, rejection: RejectAndAdmit) -> None:
        """Forget a group without training it; its prompt stays consumed (the sampler moved past it)."""
        self.grading.pop_groups([ticket])
        self.schedule.withdraw(ticket)
        del self.groups[ticket], self.done[ticket], self.judged[ticket]
        rejection.reject()

    # -------------------------------------------------------------------------------------- resume
    def state(self) -> dict[str, Any]:
        """The in-flight frontier for a checkpoint: admitted groups, finished-untrained samples and partial
        ones (tokens, log-probs, versions). The prompt cursor is the sampler's own state, saved beside it."""
        read = {d.id: d for d in self.engine.partial(list(self.live))} if self.live else {}
        parts = [_extend(replace(p), read[rid]) if rid in read else p for rid, p in self.live.items()]
        parts += self.waiting
        if self.tools is not None:  # unfinished tool trajectories restart from their prompts
            parts += [Partial(ticket, sample) for ticket, sample in self.tools.started]
        return {
            "schedule": self.schedule.state(),
            "groups": [asdict(g) for g in self.groups.values()],
            "finished": [asdict(c) for c in self.grading.completions.values()],
            "partial": [asdict(p) for p in parts],
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore ``state()`` into this fresh frontier: finished samples are graded again, partial ones wait
        to be resubmitted at the next step."""
        self.schedule.load_state(state["schedule"])
        self.groups = {int(g["ticket"]): Group(**g) for g in state["groups"]}
        for g in self.groups.values():
            if self.prompts[g.prompt_index].example.uid != g.uid:
                raise ValueError(
                    f"in-flight prompt {g.prompt_index} is {g.uid!r} in the checkpoint: the data changed"
                )
        self.done = dict.fromkeys(self.groups, 0)
        for c in state["finished"]:
            drafts = DraftCounts(**c["drafts"]) if c.get("drafts") else None
            comp = Completion(**{**c, "turns": [], "drafts": drafts})
            self.grading.take(comp)
            self.done[comp.prompt_index] += 1
        self.waiting = [Partial(**p) for p in state["partial"]]


def _extend(part: Partial, delta: Delta) -> Partial:
    """``part`` with ``delta``'s tokens, log-probs, versions and text appended (new lists: a copy of a live
    ``Partial`` read for a checkpoint never changes it); returned for chaining."""
    part.token_ids = part.token_ids + delta.token_ids
    part.logprobs = part.logprobs + delta.logprobs
    part.versions = part.versions + delta.token_versions()
    part.text += delta.text
    if part.cached_tokens is None:
        part.cached_tokens = delta.cached_tokens
    return part


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while the engine steps: each step makes a few objects per live
    request, and at ~1,000 resident requests the collector ran ~8,000 times in one step's generation (8-9 s of a
    33-s generation, SmolLM2-135M on an H200, 2026-12-02). Re-enabled afterwards as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Tickets(Mapping[int, Prompt]):
    """The frontier's groups seen as ``StreamGrading``'s prompts: ticket -> its ``Prompt``."""

    def __init__(self, frontier: Frontier) -> None:
        self.frontier = frontier

    def __getitem__(self, ticket: int) -> Prompt:
        return self.frontier.prompts[self.frontier.groups[ticket].prompt_index]

    def __len__(self) -> int:
        return len(self.frontier.groups)

    def __iter__(self) -> Iterator[int]:
        return iter(self.frontier.groups)


def generated_tokens(flow: Mapping[str, float]) -> int:
    """The tokens the engine produced inside a step's generation (gen tok/s, the trace's ``tokens_generated``):
    the frontier's count (``flow``: its metrics), not the trained groups' tokens, since a continuous step trains
    groups that finished, wholly or partly, in earlier steps (issue 47: 141,859 tok/s from a step that generated
    almost nothing)."""
    return int(flow[GENERATED_TOKENS])


def lag_metrics(rollouts: Rollouts, version: int, trace: TraceWriter, step: int) -> dict[str, float]:
    """Per-token lag (trainer version - sampling version) and per-sample version span of a trained batch: the
    mean / max in the metrics line, the lag histogram in the trace (``lag_tokens``, one counter per lag)."""
    lags: dict[int, int] = {}
    spans = []
    for s in rollouts:
        versions = s.completion.versions or []
        for v in versions:
            lags[version - v] = lags.get(version - v, 0) + 1
        spans.append(max(versions) - min(versions) if versions else 0)
    tokens = sum(lags.values())
    for lag, count in sorted(lags.items()):
        trace.counter("lag_tokens", step, count, lag=lag)
    return {
        "staleness/lag_mean": sum(k * c for k, c in lags.items()) / tokens if tokens else 0.0,
        "staleness/lag_max": float(max(lags, default=0)),
        "staleness/span_mean": sum(spans) / len(spans) if spans else 0.0,
        "staleness/span_max": float(max(spans, default=0)),
    }
