"""Finding calls in model text and building tool turns, for both formats."""

from __future__ import annotations

from typing import Any

import pytest

from reasoning_rl.rollout.tool_calls import FencedFormat, HermesFormat, make_format

F = "```"


def test_fenced_finds_the_last_python_block_only() -> None:
    fmt = FencedFormat()
    text = f"a\n{F}python\nx = 1\n{F}\nb\n{F}text\nno\n{F}\n{F}python\nprint(x)\n{F}"
    call = fmt.find(text)
    assert call is not None and call.name == "python" and call.arguments == {"code": "print(x)"}
    assert call.end == len(text)
    assert fmt.find(f"{F}python\nunclosed") is None and fmt.find(f"{F}text\nx\n{F}\n") is None


def test_hermes_parses_json_calls_and_reports_malformed_ones() -> None:
    fmt = HermesFormat()
    ok = fmt.find('x <tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}\n</tool_call>')
    assert ok is not None and (ok.name, ok.arguments, ok.error) == ("calculator", {"expression": "1+1"}, "")
    encoded = fmt.find('<tool_call>{"name": "p", "arguments": "{\\"code\\": \\"1\\"}"}</tool_call>')
    assert encoded is not None and encoded.arguments == {"code": "1"}
    for bad, why in [
        ("{oops}", "not valid JSON"),
        ('["a"]', "needs"),
        ('{"name": "p", "arguments": 3}', "object"),
    ]:
        call = fmt.find(f"<tool_call>{bad}</tool_call>")
        assert call is not None and why in call.error
    assert fmt.find("<tool_call>{") is None


def test_tool_turns_are_the_formats_wrapping(bpe_tokenizer: Any) -> None:
    tok = bpe_tokenizer
    assert tok.decode(FencedFormat().tool_turn("42", tok)) == f"{F}output\n42\n{F}\n"
    assert tok.decode(FencedFormat().tool_turn("42\n", tok)) == f"{F}output\n42\n{F}\n"
    assert (
        tok.decode(HermesFormat().tool_turn("42", tok), skip_special_tokens=False)
        == "<|end|><|tool|>42<|end|><|assistant|>"
    )


def test_unknown_format_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown tool-call format 'xml'; choose one of fenced, hermes"):
        make_format("xml")
