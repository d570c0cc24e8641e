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


@pytest.mark.parametrize(
    "body",
    [
        "[" * 100_000 + "]" * 100_000,  # json raises RecursionError
        '{"name": "p", "arguments": {"x": ' + "9" * 5000 + "}}",  # past Python's int digit limit: ValueError
        '{"name": "p", "arguments": "' + "[" * 100_000 + '"}',  # the JSON-encoded arguments string, nested
        '{"name": "p", "arguments": ' + '{"a": ' * 40 + "1" + "}" * 40 + "}",  # parses, too deep to keep
    ],
    ids=["deep-json", "huge-int", "deep-encoded-arguments", "deep-arguments"],
)
def test_a_hostile_hermes_call_is_an_invalid_call_not_an_exception(body: str) -> None:
    """Model text is untrusted: whatever the call's JSON does to the parser, the result is that call's error
    (shown to the model as invalid_call), never an exception that would take down the whole rollout batch."""
    call = HermesFormat().find(f"<tool_call>{body}</tool_call>")
    assert call is not None and call.error and call.arguments == {}


def test_a_fence_inside_the_code_does_not_end_the_fenced_call() -> None:
    """Only a line of its own closes the block: a ``` inside a string or a comment is part of the code."""
    code = f'md = "{F}python"\nprint(md + "{F}")  # ends with {F}\nprint(1)'
    call = FencedFormat().find(f"Let me run:\n{F}python\n{code}\n{F}\nrest")
    assert call is not None and call.arguments == {"code": code}
    empty = FencedFormat().find(f"{F}python\n{F}\n")
    assert empty is not None and empty.arguments == {"code": ""}
