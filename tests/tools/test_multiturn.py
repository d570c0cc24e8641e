"""The multi-turn tool loop: exact tokens, the loss mask, budgets, infrastructure errors, no per-turn barrier,
and (Docker) python calls in the real sandbox whose output the policy continues from."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from tools_testutil import ScriptedEngine

from reasoning_rl.rollout.base import SamplingConfig
from reasoning_rl.rollout.multiturn import (
    ToolRolloutConfig,
    run_tool_rollouts,
    tool_stats,
    trajectory_seed,
)
from reasoning_rl.tools import ToolResult, tool

FENCE = "```"


def _cfg(**kw: Any) -> ToolRolloutConfig:
    return ToolRolloutConfig(sampling=SamplingConfig(max_tokens=kw.pop("per_call", 200)), **kw)


def _run(
    engine: ScriptedEngine, prompts: list[str], tools: dict[str, Any], tok: Any, cfg: ToolRolloutConfig
) -> Any:
    return asyncio.run(run_tool_rollouts(engine, [engine.prompt(p) for p in prompts], tools, tok, cfg))


@tool()
def echo(code: str) -> str:
    """Returns its input reversed (a cheap deterministic tool for token tests)."""
    return code[::-1]


def test_tokens_are_exact_engine_ids_plus_tool_turn_ids_and_mask_marks_model_tokens(
    bpe_tokenizer: Any,
) -> None:
    tok = bpe_tokenizer
    # "4","2" as two ids: decoding and re-tokenising would give the single merged id for "42" (drift).
    unmerged = (
        tok.encode(f"x=1\n{FENCE}python\nprint(")
        + tok.encode("4")
        + tok.encode("2")
        + tok.encode(f")\n{FENCE}\n")
    )
    assert tok.encode(tok.decode(unmerged)) != unmerged  # the drift this test is about
    final = tok.encode("done")
    engine = ScriptedEngine(tok, {"Q:": [unmerged, final]})
    (t,) = _run(engine, ["Q:"], {"python": echo}, tok, _cfg())
    turn_ids = tok.encode(f"{FENCE}output\n{'print(42)'[::-1]}\n{FENCE}\n")
    assert t.token_ids == unmerged + turn_ids + final + [tok.eos_token_id]
    assert t.mask == [1] * len(unmerged) + [0] * len(turn_ids) + [1] * (len(final) + 1)
    assert t.logprobs[: len(unmerged)] == [-(k + 1) / 100 for k in range(len(unmerged))]
    assert all(lp == 0.0 for lp, m in zip(t.logprobs, t.mask, strict=True) if m == 0)
    assert len(t.logprobs) == len(t.token_ids) and t.finish_reason == "stop"
    assert [turn.arguments for turn in t.turns] == [{"code": "print(42)"}]


def test_hermes_calls_get_a_chat_template_tool_turn(bpe_tokenizer: Any) -> None:
    tok = bpe_tokenizer
    call = '<tool_call>{"name": "python", "arguments": {"code": "abc"}}</tool_call>'
    engine = ScriptedEngine(
        tok, {"Q:": [call, lambda ctx: "saw " + ctx.split("<|tool|>")[1].split("<|end|>")[0]]}
    )
    (t,) = _run(engine, ["Q:"], {"python": echo}, tok, _cfg(format="hermes"))
    text = tok.decode(t.token_ids)
    assert text == call + "<|end|><|tool|>cba<|end|><|assistant|>saw cba<eos>"
    turn = tok.encode("<|end|><|tool|>cba<|end|><|assistant|>")
    start = len(tok.encode(call))
    assert (
        t.mask[start : start + len(turn)] == [0] * len(turn)
        and t.token_ids[start : start + len(turn)] == turn
    )


def test_bad_calls_are_shown_to_the_model_and_counted(bpe_tokenizer: Any) -> None:
    tok = bpe_tokenizer
    engine = ScriptedEngine(
        tok,
        {
            "A": ["<tool_call>{not json}</tool_call>", "ok"],
            "B": ['<tool_call>{"name": "nope", "arguments": {}}</tool_call>', "ok"],
        },
    )
    a, b = _run(engine, ["A", "B"], {"python": echo}, tok, _cfg(format="hermes"))
    assert a.turns[0].result.status == "invalid_call" and "not valid JSON" in tok.decode(a.token_ids)
    assert b.turns[0].result.status == "invalid_call" and "unknown tool 'nope'" in tok.decode(b.token_ids)
    assert a.finish_reason == b.finish_reason == "stop"
    assert tool_stats([a, b])["tool_errors"] == 2


def test_max_turns_and_token_budget_end_trajectories(bpe_tokenizer: Any) -> None:
    tok = bpe_tokenizer
    block = f"{FENCE}python\n1\n{FENCE}\n"
    engine = ScriptedEngine(tok, {"A": [block, block, "never"], "B": ["x" * 50]})
    a, b = _run(engine, ["A", "B"], {"python": echo}, tok, _cfg(max_turns=1, max_tokens=50, per_call=8))
    assert a.finish_reason == "max_turns" and len(a.turns) == 1
    assert b.finish_reason == "length" and len(b.token_ids) == 50  # 8-token calls, continued up to the budget
    assert all(m == 1 for m in b.mask)


def test_a_non_python_fence_keeps_generating(bpe_tokenizer: Any) -> None:
    tok = bpe_tokenizer
    engine = ScriptedEngine(tok, {"A": [f"{FENCE}text\nhi\n{FENCE}\n", "the end"]})
    (a,) = _run(engine, ["A"], {"python": echo}, tok, _cfg())
    assert a.turns == [] and tok.decode(a.token_ids) == f"{FENCE}text\nhi\n{FENCE}\nthe end<eos>"


class _BrokenSandboxTool:
    name, description = "python", "always an infrastructure failure"
    parameters: dict[str, Any] = {"type": "object"}

    async def call(self, arguments: dict[str, Any], *, session: str, budget_s: float) -> ToolResult:
        return ToolResult("Error: the sandbox failed", "infra_error", detail="container start: daemon gone")

    def end_session(self, session: str) -> None:
        """Stateless."""


def test_infrastructure_failure_marks_the_sample_error(bpe_tokenizer: Any) -> None:
    tok = bpe_tokenizer
    engine = ScriptedEngine(tok, {"A": [f"{FENCE}python\n1\n{FENCE}\n", "x"]})
    (a,) = _run(engine, ["A"], {"python": _BrokenSandboxTool()}, tok, _cfg())
    assert a.finish_reason == "error" and "daemon gone" in a.error
    assert tool_stats([a])["tool_infra_errors"] == 1 and tool_stats([a])["samples_error"] == 1


def test_a_slow_tool_does_not_block_other_trajectories(bpe_tokenizer: Any) -> None:
    """While A waits on its tool, B generates three more turns (no batch-wide barrier per turn)."""
    tok = bpe_tokenizer
    release = threading.Event()

    @tool(name="python")
    def gated(code: str) -> str:
        if code == "slow":
            assert release.wait(60)  # a hang guard: B's three turns (an event) open it
        return "r"

    def b_step(ctx: str) -> str:
        if ctx.count("output") == 3:
            release.set()
        return f"{FENCE}python\nfast\n{FENCE}\n"

    engine = ScriptedEngine(
        tok,
        {"A": [f"{FENCE}python\nslow\n{FENCE}\n", "a done"], "B": [b_step, b_step, b_step, b_step, "b done"]},
    )
    a, b = _run(engine, ["A", "B"], {"python": gated}, tok, _cfg(max_turns=5, tool_budget_s=60.0))
    assert a.finish_reason == b.finish_reason == "stop" and len(b.turns) == 4
    first_a_continuation = next(i for i, s in enumerate(engine.seen) if s.startswith("A") and "output" in s)
    b_turns_before = [s for s in engine.seen[:first_a_continuation] if s.startswith("B") and "output" in s]
    assert len(b_turns_before) >= 3


@pytest.mark.docker
@pytest.mark.slow
def test_scripted_policy_runs_python_in_the_sandbox_and_continues_from_its_output(
    bpe_tokenizer: Any, python_tool: Any
) -> None:
    tok = bpe_tokenizer

    def answer(ctx: str) -> str:
        return "The answer is " + ctx.rsplit(f"{FENCE}output\n", 1)[1].split("\n")[0]

    engine = ScriptedEngine(
        tok,
        {
            "Q1:": [
                f"{FENCE}python\nx = 6 * 7\nx\n{FENCE}\n",
                f"{FENCE}python\nprint(x + 1)\n{FENCE}\n",
                answer,
            ],
            "Q2:": [f"{FENCE}python\nprint(x)\n{FENCE}\n", answer],
        },
    )
    q1, q2 = _run(engine, ["Q1:", "Q2:"], {"python": python_tool}, tok, _cfg())
    assert [turn.result.text for turn in q1.turns] == ["42\n", "43\n"]
    assert tok.decode(q1.token_ids).endswith("The answer is 43<eos>")
    assert q2.turns[0].result.status == "error" and "NameError" in q2.turns[0].result.text  # nothing shared


class _SessionRecorder:
    name, description = "python", "records which session each call and end belongs to"
    parameters: dict[str, Any] = {"type": "object"}

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.ended: list[str] = []
        self.events: list[tuple[str, str]] = []

    async def call(self, arguments: dict[str, Any], *, session: str, budget_s: float) -> ToolResult:
        assert session not in self.ended, "a call after its session ended"
        self.calls.append(session)
        self.events.append(("call", session))
        return ToolResult("r", "ok")

    def end_session(self, session: str) -> None:
        self.ended.append(session)
        self.events.append(("end", session))


def test_each_trajectory_has_its_own_session_ended_when_it_finishes(bpe_tokenizer: Any) -> None:
    tok = bpe_tokenizer
    block = f"{FENCE}python\n1\n{FENCE}\n"
    rec = _SessionRecorder()
    engine = ScriptedEngine(tok, {"A": [block, "a"], "B": [block, block, block, "b"]})
    a, b = _run(engine, ["A", "B"], {"python": rec}, tok, _cfg())
    assert len(set(rec.calls)) == 2 and rec.calls.count(rec.calls[0]) == 1  # A's one call, B's three
    assert set(rec.ended) == set(rec.calls)
    a_session, b_session = rec.calls[0], rec.calls[-1]
    assert rec.events.index(("end", a_session)) < len(rec.events) - 1 - rec.events[::-1].index(
        ("call", b_session)
    )
    # A's session ended while B was still making calls


def test_an_engine_failure_propagates_and_ends_the_sessions(bpe_tokenizer: Any) -> None:
    tok = bpe_tokenizer
    rec = _SessionRecorder()
    engine = ScriptedEngine(
        tok, {"A": [f"{FENCE}python\n1\n{FENCE}\n"]}, eos=False
    )  # no step left: IndexError
    with pytest.raises(IndexError):
        _run(engine, ["A"], {"python": rec}, tok, _cfg())
    assert rec.ended == rec.calls and len(rec.calls) == 1


def test_a_set_seed_differs_per_generate_call(bpe_tokenizer: Any) -> None:
    tok = bpe_tokenizer
    block = f"{FENCE}python\n1\n{FENCE}\n"
    seeded = ScriptedEngine(tok, {"A": [block, block, "a"]})
    asyncio.run(
        run_tool_rollouts(
            seeded,
            [seeded.prompt("A")],
            {"python": echo},
            tok,
            ToolRolloutConfig(sampling=SamplingConfig(seed=7)),
        )
    )
    assert seeded.seeds[0] == trajectory_seed(7, 0, 0, 1)
    assert len(set(seeded.seeds)) == len(seeded.seeds) == 3
    unseeded = ScriptedEngine(tok, {"A": [block, "a"]})
    _run(unseeded, ["A"], {"python": echo}, tok, _cfg())
    assert unseeded.seeds == [None, None]


_OTHER_FINISHED = threading.Event()


@tool()
def nap(code: str) -> str:
    """The slow call returns only once the other trajectory finished (an event, not a 0.3-s sleep a loaded
    machine could outlast): it fixes which trajectories share a generate call."""
    if "slow" in code:
        assert _OTHER_FINISHED.wait(60), "the other trajectory never finished"
    return "ok"


def _tell_when_finished(engine: ScriptedEngine, other: str) -> None:
    """``_OTHER_FINISHED`` is set by ``other``'s last (third) generate call."""
    _OTHER_FINISHED.clear()
    generate = engine.generate

    def generate_and_tell(prompts: Any, sampling: Any) -> Any:
        out = generate(prompts, sampling)
        if len(engine.seeds_of[other]) == 3:
            _OTHER_FINISHED.set()
        return out

    engine.generate = generate_and_tell  # type: ignore[method-assign]


def test_seeds_belong_to_the_trajectory_not_to_its_wave(bpe_tokenizer: Any) -> None:
    """Wave composition depends on tool timing; each trajectory's seeds must not (else a rerun of the same run
    seed samples differently): A's and B's seeds are the same whichever tool call is slow."""
    tok = bpe_tokenizer

    def script(slow: str) -> dict[str, list[Any]]:
        call = {p: f"{FENCE}python\n{'slow' if p == slow else 'fast'}\n{FENCE}\n" for p in "AB"}
        return {p: [call[p], call[p], "x"] for p in "AB"}

    seen = []
    calls = []
    for slow in "AB":
        engine = ScriptedEngine(tok, script(slow))
        _tell_when_finished(engine, "B" if slow == "A" else "A")
        cfg = ToolRolloutConfig(sampling=SamplingConfig(seed=3, max_tokens=50))
        trajs = asyncio.run(
            run_tool_rollouts(engine, [engine.prompt("A"), engine.prompt("B")], {"python": nap}, tok, cfg)
        )
        assert all(t.finish_reason == "stop" for t in trajs)
        seen.append(engine.seeds_of)
        calls.append(engine.calls)
    assert calls == [5, 5]  # A and B never shared a call after their first: waves differed by timing
    assert seen[0] == seen[1]
    for p in "AB":
        assert len(seen[0][p]) == 3 and len(set(seen[0][p])) == 3  # one per call, all distinct
    assert not set(seen[0]["A"]) & set(seen[0]["B"])


class _FailingSandbox:
    """A sandbox whose pool broke: every run is a ``sandbox_error`` (or raises, like a lost Docker daemon)."""

    name, isolation = "broken", "strong"

    def __init__(self, raise_: bool) -> None:
        self.raise_ = raise_

    def run(self, request: Any) -> Any:
        from sandboxes import RunResult

        if self.raise_:
            raise ConnectionError("docker daemon gone")
        return RunResult(b"", b"", None, 0.0, "sandbox_error", "container died")

    def end_session(self, session: str) -> None:
        """Nothing held per session."""

    def close(self) -> None:
        """Nothing held."""


@pytest.mark.parametrize("raise_", [False, True])
def test_a_broken_sandbox_ruins_the_trajectory_as_error_not_as_a_tool_error(
    bpe_tokenizer: Any, raise_: bool
) -> None:
    from reasoning_rl.tools.python_tool import PythonTool

    tok = bpe_tokenizer
    tool = PythonTool(_FailingSandbox(raise_), pool_size=1)  # type: ignore[arg-type]
    try:
        engine = ScriptedEngine(tok, {"A": [f"{FENCE}python\nprint(1)\n{FENCE}\n", "never"]})
        (t,) = _run(engine, ["A"], {"python": tool}, tok, _cfg())
    finally:
        tool.close()
    assert t.finish_reason == "error" and ("docker daemon gone" if raise_ else "container died") in t.error
    assert t.turns[0].result.status == "infra_error" and len(engine.seen) == 1  # nothing generated after it
    stats = tool_stats([t])
    assert stats["tool_infra_errors"] == 1 and stats["tool_errors"] == 0 and stats["samples_error"] == 1


@pytest.mark.docker
@pytest.mark.slow
def test_hostile_cells_in_a_rollout_are_counted_tool_errors_and_spare_the_others(
    bpe_tokenizer: Any, python_tool: Any
) -> None:
    """A fork bomb, a memory bomb, a flood of output and a network call in flight with a normal trajectory:
    each comes back to its model as error text (the trajectory goes on), the normal one is untouched, and a
    trajectory started afterwards on the same warm pool works."""
    tok = bpe_tokenizer
    hostile = {
        "F:": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        "M:": 'x = bytearray(1 << 30)\nx[::4096] = b"m" * len(x[::4096])',
        "O:": "while True:\n    print('y' * 10000)",
        "N:": "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)",
    }

    def saw_error(ctx: str) -> str:
        return "saw error" if "Error" in ctx.rsplit(f"{FENCE}output\n", 1)[1] else "no error"

    scripts: dict[str, list[Any]] = {
        p: [f"{FENCE}python\n{code}\n{FENCE}\n", saw_error] for p, code in hostile.items()
    }
    scripts["G:"] = [f"{FENCE}python\nprint(6 * 7)\n{FENCE}\n", lambda ctx: "got " + ctx.rsplit("\n", 3)[-3]]
    engine = ScriptedEngine(tok, scripts)
    cfg = _cfg(tool_budget_s=2.0, max_tokens=8000)  # room for the 2000 characters of clipped output
    trajs = _run(engine, list(scripts), {"python": python_tool}, tok, cfg)
    *bad, good = trajs
    for t in bad:
        assert t.finish_reason == "stop" and tok.decode(t.token_ids).endswith("saw error<eos>"), tok.decode(
            t.token_ids
        )
        result = t.turns[0].result
        assert result.status in ("error", "timeout") and result.latency_s < 60  # the latency: a hang guard
    assert [turn.result.text for turn in good.turns] == ["42\n"] and good.finish_reason == "stop"
    stats = tool_stats(trajs)
    assert stats["tool_errors"] == 4 and stats["tool_infra_errors"] == 0 and stats["samples_error"] == 0
    after = ScriptedEngine(
        tok, {"Z:": [f"{FENCE}python\nimport os\nprint(len(os.listdir('.')) < 5)\n{FENCE}\n", "ok"]}
    )
    (z,) = _run(after, ["Z:"], {"python": python_tool}, tok, cfg)
    assert z.turns[0].result.status == "ok" and z.turns[0].result.text == "True\n"


@pytest.mark.parametrize("fmt", ["fenced", "hermes"])
def test_a_prompt_ending_inside_a_call_is_closed_by_the_model(bpe_tokenizer: Any, fmt: str) -> None:
    """The prompt opens the call and the model's first tokens close it: the call is the prompt's tail plus
    the model's text (the way a real-engine test forces a call); an already closed call in the prompt is not one."""
    tok = bpe_tokenizer
    if fmt == "fenced":
        prompt, close = f"Q:\n{FENCE}python\nprint(42)\n", f"{FENCE}\n"
        done = f"Old:\n{FENCE}python\nprint(1)\n{FENCE}\n"
    else:
        prompt, close = 'Q:<tool_call>{"name": "python", "arguments": {"code": "print(42)"', "}}</tool_call>"
        done = 'Old:<tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>'
    engine = ScriptedEngine(tok, {prompt: [close, "end"], done: ["plain"]})
    opened, closed = _run(engine, [prompt, done], {"python": echo}, tok, _cfg(format=fmt))
    assert [turn.arguments for turn in opened.turns] == [{"code": "print(42)"}]
    assert ")24(tnirp" in tok.decode(opened.token_ids) and opened.finish_reason == "stop"
    assert closed.turns == [] and closed.finish_reason == "stop"


def test_a_hostile_hermes_call_costs_its_trajectory_a_turn_not_the_batch(bpe_tokenizer: Any) -> None:
    """A call whose JSON nests 3000 levels (json raises RecursionError) next to a normal call: the hostile one
    gets an invalid_call turn and goes on, the other is untouched; nothing raises out of the rollout."""
    tok = bpe_tokenizer
    hostile = "<tool_call>" + "[" * 3000 + "]" * 3000 + "</tool_call>"
    good = '<tool_call>{"name": "python", "arguments": {"code": "abc"}}</tool_call>'
    engine = ScriptedEngine(tok, {"H:": [hostile, "after"], "G:": [good, "done"]})
    bad, fine = _run(engine, ["H:", "G:"], {"python": echo}, tok, _cfg(format="hermes", max_tokens=200_000))
    assert [turn.result.status for turn in bad.turns] == ["invalid_call"] and bad.finish_reason == "stop"
    assert [turn.result.text for turn in fine.turns] == ["cba"] and fine.finish_reason == "stop"
