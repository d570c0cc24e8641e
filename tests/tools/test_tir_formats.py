"""The two TIR formats as their model families render them (issue 33): Qwen3's Hermes ``<tool_call>`` with its
real chat template (the tools listed in the system turn, tool results as ``<tool_response>`` user turns, the
reasoning kept across a multi-step call) and Qwen2.5-Math's fenced ```python / ```output inside one assistant
turn. Each trajectory the multi-turn loop builds must be, token for token, what the family's template renders for
the same conversation: what the model saw in training and sees behind an OpenAI-style server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from tools_testutil import ScriptedEngine

from reasoning_rl.config import RolloutConfig
from reasoning_rl.data.prompts import render_prompt
from reasoning_rl.data.schema import Example
from reasoning_rl.rollout.base import SamplingConfig
from reasoning_rl.rollout.multiturn import ToolRolloutConfig, ToolTrajectory, run_tool_rollouts
from reasoning_rl.rollout.toolset import prompt_tools
from reasoning_rl.tools import tool
from reasoning_rl.tools.python_tool import PythonTool
from reasoning_rl.tools.registry import describe

QUESTION = "Solve x^2 - 5x + 6 = 0 and give the sum of the roots."
CODE = "import sympy\nx = sympy.symbols('x')\nprint(sum(sympy.solve(x**2 - 5*x + 6, x)))"
TIR_SYSTEM = (
    "Please integrate natural language reasoning with programs to solve the problem above, "
    "and put your final answer within \\boxed{}."
)


@tool(name="python")
def fake_python(code: str) -> str:
    """Stands in for the sandboxed python tool: the output of CODE."""
    return "5" if code == CODE else f"unexpected code: {code!r}"


def _example(messages: list[dict[str, str]]) -> Example:
    return Example("q0", "math", tuple(messages), "5", "math")


def _rollout(tok: Any, prompt: list[int], steps: list[Any], fmt: str, python: Any) -> ToolTrajectory:
    text = tok.decode(prompt)
    engine = ScriptedEngine(tok, {text: steps})
    cfg = ToolRolloutConfig(format=fmt, max_tokens=2000, sampling=SamplingConfig(max_tokens=500))  # type: ignore[arg-type]
    (t,) = asyncio.run(run_tool_rollouts(engine, [prompt], {"python": python}, tok, cfg))
    return t


def test_qwen3_hermes_call_round_trips_through_its_chat_template(qwen3_tokenizer: Any) -> None:
    tok = qwen3_tokenizer
    tools = prompt_tools(RolloutConfig(tools=["python"], tool_format="hermes"))
    assert tools == [describe("python")] and tools[0]["function"]["name"] == "python"
    user = {"role": "user", "content": QUESTION}
    prompt = render_prompt(tok, _example([user]), chat_template=True, tools=tools)
    shown = tok.decode(prompt)
    assert shown.startswith("<|im_start|>system\n# Tools\n") and json.dumps(tools[0]) in shown
    assert shown.endswith("<|im_start|>user\n" + QUESTION + "<|im_end|>\n<|im_start|>assistant\n")

    args = {"code": CODE}
    call = (
        "<think>\nA quadratic: let sympy solve it.\n</think>\n\nI will compute the roots.\n"
        f'<tool_call>\n{{"name": "python", "arguments": {json.dumps(args)}}}\n</tool_call>'
    )
    response = "<|im_end|>\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    final = "<think>\nThe roots sum to 5.\n</think>\n\nThe sum of the roots is \\boxed{5}."
    seen: list[str] = []

    def answer(ctx: str) -> str:
        seen.append(ctx)
        return final

    t = _rollout(tok, prompt, [call, answer], "hermes", fake_python)
    assert seen[0].endswith(call + response)  # the result reached the model as Qwen3 shows it
    assert [(turn.name, turn.arguments, turn.result.text) for turn in t.turns] == [("python", args, "5")]
    assert (t.finish_reason, t.token_ids[-1]) == ("stop", tok.eos_token_id)
    turn_ids = tok.encode(response)
    start = len(tok.encode(call))
    assert t.token_ids[start : start + len(turn_ids)] == turn_ids  # the template's ids, not the model's
    assert t.mask[start : start + len(turn_ids)] == [0] * len(turn_ids)
    conversation = [
        user,
        {
            "role": "assistant",
            "content": call.split("\n<tool_call>")[0],
            "tool_calls": [{"type": "function", "function": {"name": "python", "arguments": args}}],
        },
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": final},
    ]
    rendered = tok.apply_chat_template(conversation, tools=tools, tokenize=False)
    assert tok.decode(prompt + t.token_ids) + "\n" == rendered


def test_qwen25_math_fenced_tir_round_trips_through_its_chat_template(qwen25_math_tokenizer: Any) -> None:
    tok = qwen25_math_tokenizer
    messages = [{"role": "system", "content": TIR_SYSTEM}, {"role": "user", "content": QUESTION}]
    assert prompt_tools(RolloutConfig(tools=["python"], tool_format="fenced")) is None  # no function list
    prompt = render_prompt(tok, _example(messages), chat_template=True)
    assert tok.decode(prompt) == tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    block = f"Let me solve it with sympy.\n```python\n{CODE}\n```\n"
    output = "```output\n5\n```\n"  # the Qwen2.5-Math harness's convention, inside the assistant turn
    final = "The sum of the roots is $\\boxed{5}$."
    seen: list[str] = []

    def answer(ctx: str) -> str:
        seen.append(ctx)
        return final

    t = _rollout(tok, prompt, [block, answer], "fenced", fake_python)
    assert seen[0].endswith(block + output)
    assert [(turn.arguments, turn.result.text) for turn in t.turns] == [({"code": CODE}, "5")]
    rendered = tok.apply_chat_template(
        [*messages, {"role": "assistant", "content": block + output + final}], tokenize=False
    )
    assert tok.decode(prompt + t.token_ids) + "\n" == rendered


@pytest.mark.slow
@pytest.mark.docker
def test_qwen25_math_tir_cell_runs_sympy_in_the_sandbox(
    qwen25_math_tokenizer: Any, python_tool: PythonTool
) -> None:
    """The same trajectory with the real python tool (sympy in the sandbox): its output block is what the
    model continues from."""
    tok = qwen25_math_tokenizer
    messages = [{"role": "system", "content": TIR_SYSTEM}, {"role": "user", "content": QUESTION}]
    prompt = render_prompt(tok, _example(messages), chat_template=True)
    block = f"```python\n{CODE}\n```\n"

    def answer(ctx: str) -> str:
        return "The sum is \\boxed{" + ctx.rsplit("```output\n", 1)[1].split("\n")[0] + "}."

    t = _rollout(tok, prompt, [block, answer], "fenced", python_tool)
    assert t.turns[0].result.status == "ok", t.turns[0]
    assert tok.decode(t.token_ids) == block + "```output\n5\n```\nThe sum is \\boxed{5}.<|im_end|>"
