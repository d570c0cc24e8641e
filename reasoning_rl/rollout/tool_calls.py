"""Tool-call formats: how a call is found in the model's text, which stop strings end a generation at a call,
and the tool turn inserted after it (as token ids, so the training sequence never depends on re-tokenising text).

- ``fenced`` (TIR style): a ```python block is a call of the ``python`` tool; the output follows as an ```output
  block. Generation stops at a closing fence.
- ``hermes`` (Qwen/Hermes chat templates): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; the
  result is a ``tool`` role message rendered by the tokenizer's own chat template.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, Protocol

FormatName = Literal["fenced", "hermes"]
# The closing fence is a line of its own (as in Markdown), so a ``` inside the code (a string, a comment) is code.
_FENCED = re.compile(r"```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_SENTINEL = "\x00RRL-TOOL-CALL\x00"
MAX_ARGUMENT_DEPTH = 16


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer the rollout needs."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A parsed call. ``error`` is set when the text is a call but malformed (bad JSON): shown to the model."""

    name: str
    arguments: dict[str, Any]
    end: int  # offset in the parsed text just past the call
    error: str = ""


class CallFormat(Protocol):
    name: str
    stop: tuple[str, ...]

    def find(self, text: str) -> ToolCall | None:
        """The last complete call in ``text``, if any."""
        ...

    def tool_turn(self, output: str, tokenizer: Tokenizer) -> list[int]:
        """Token ids inserted after a call: the output plus whatever the format wraps it in."""
        ...

    def open_call(self, text: str) -> str:
        """The tail of ``text`` from an opened but unclosed call (a prompt ending inside one), else ''."""
        ...


def _open_tail(text: str, opener: str, closer: str) -> str:
    at = text.rfind(opener)
    return text[at:] if at >= 0 and closer not in text[at + len(opener) :] else ""


class FencedFormat:
    name: str = "fenced"
    stop: tuple[str, ...] = ("```\n", "```\r\n")

    def find(self, text: str) -> ToolCall | None:
        last = None
        for m in _FENCED.finditer(text):
            last = m
        if last is None:
            return None
        code = last.group(1)
        return ToolCall("python", {"code": code[:-1] if code.endswith("\n") else code}, last.end())

    def tool_turn(self, output: str, tokenizer: Tokenizer) -> list[int]:
        body = output if output.endswith("\n") or not output else output + "\n"
        return list(tokenizer.encode(f"```output\n{body}```\n", add_special_tokens=False))

    def open_call(self, text: str) -> str:
        return _open_tail(text, "```python", "```")


def _json(text: str) -> tuple[Any, str]:
    """Parsed JSON, or the reason it is none. Model text is untrusted: besides syntax errors, ``json`` raises
    ``RecursionError`` on deep nesting and ``ValueError`` on integer literals past Python's digit limit; each is
    that call's ``invalid_call``, never an exception out of the rollout."""
    try:
        return json.loads(text), ""
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        return None, f"{type(exc).__name__}: {str(exc)[:200]}"


def _depth(value: Any, level: int = 0) -> int:
    """Nesting depth of parsed JSON, stopping early past the limit (arguments are stored with the sample)."""
    if level > MAX_ARGUMENT_DEPTH or not isinstance(value, dict | list):
        return level
    items = value.values() if isinstance(value, dict) else value
    return max((_depth(v, level + 1) for v in items), default=level + 1)


class HermesFormat:
    name: str = "hermes"
    stop: tuple[str, ...] = ("</tool_call>",)

    def find(self, text: str) -> ToolCall | None:
        last = None
        for m in _HERMES.finditer(text):
            last = m
        if last is None:
            return None
        call, problem = _json(last.group(1))
        if problem:
            return ToolCall("", {}, last.end(), f"the tool call is not valid JSON ({problem})")
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return ToolCall("", {}, last.end(), 'a tool call needs {"name": ..., "arguments": {...}}')
        args = call.get("arguments", {})
        if isinstance(args, str):  # some models emit the arguments object JSON-encoded
            args, problem = _json(args)
            if problem:
                return ToolCall(call["name"], {}, last.end(), f"arguments are not valid JSON ({problem})")
        if not isinstance(args, dict):
            return ToolCall(call["name"], {}, last.end(), "arguments must be a JSON object")
        if _depth(args) > MAX_ARGUMENT_DEPTH:
            return ToolCall(
                call["name"], {}, last.end(), f"arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels"
            )
        return ToolCall(call["name"], args, last.end())

    def open_call(self, text: str) -> str:
        return _open_tail(text, "<tool_call>", "</tool_call>")

    def tool_turn(self, output: str, tokenizer: Tokenizer) -> list[int]:
        """What the chat template puts between the end of the assistant's call and the next assistant turn:
        the rendering of [assistant, tool] + generation prompt, minus the rendering up to the assistant's text."""
        assistant = {"role": "assistant", "content": _SENTINEL}
        conv = [{"role": "user", "content": "u"}, assistant]
        with_tool = tokenizer.apply_chat_template(
            [*conv, {"role": "tool", "content": output}], tokenize=False, add_generation_prompt=True
        )
        cut = with_tool.find(_SENTINEL)
        if cut < 0:
            raise ValueError(
                "the chat template does not render assistant content verbatim; cannot place tool turns"
            )
        return list(tokenizer.encode(with_tool[cut + len(_SENTINEL) :], add_special_tokens=False))


FORMATS: dict[str, type[FencedFormat] | type[HermesFormat]] = {"fenced": FencedFormat, "hermes": HermesFormat}


def make_format(name: str) -> CallFormat:
    if name not in FORMATS:
        raise ValueError(f"unknown tool-call format {name!r}; choose one of {', '.join(FORMATS)}")
    return FORMATS[name]()
