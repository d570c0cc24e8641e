"""A small Lean 4 lexer: enough to tell code from comments, strings and char literals.

The guard and the statement comparison work on these tokens, so `sorry` inside `/- nested /- comments -/ -/`,
`"strings"` or `'c'` literals is never mistaken for code, and `h_sorry` is never mistaken for `sorry`.
One compiled regex does the common cases, so a 100 KB response lexes in tens of milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

TokenKind = Literal["ident", "number", "string", "char", "name_literal", "hash_command", "symbol"]

# Lean identifiers: Unicode letters or `_` first (not the binders λ Π Σ), then also digits, subscripts, ' ! ?.
_ID_FIRST = r"(?![λΠΣ])[^\W\d]"
_ID_REST = r"(?:(?![λΠΣ])\w|['!?])"
_ATOM = rf"(?:«[^»\n]*»|{_ID_FIRST}{_ID_REST}*)"
_IDENT = rf"{_ATOM}(?:\.{_ATOM})*"
# Whitespace and line comments are skipped inside the regex (possessively: a comment is never re-read as
# code); each match is then exactly one token, the end of the text, or the start of a block comment or
# string, which the loop finishes by hand.
_MASTER = re.compile(
    rf"""
    (?:\s|--[^\n]*)*+
    (?:
      (?P<end>\Z)
    | (?P<block_comment>/-)
    | (?P<string>")
    | (?P<raw_string>r(?P<hashes>\#*)")
    | (?P<char>'(?:\\(?:x[0-9a-fA-F]{{2}}|u\{{[0-9a-fA-F]+\}}|.)|[^\\'\n])')
    | (?P<name_literal>``?{_IDENT})
    | (?P<hash_command>\#{_ID_FIRST}{_ID_REST}*)
    | (?P<number>0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?)
    | (?P<ident>{_IDENT})
    | (?P<symbol>:=|@\[|=>|<;>|\.\.|::|.)
    )
    """,
    re.VERBOSE | re.DOTALL,
)
_BLOCK_MARK = re.compile(r"/-|-/")
_STRING_END = re.compile(r'(?:[^"\\]|\\.)*"', re.DOTALL)


class LexError(ValueError):
    """Text that Lean itself could not lex (e.g. an unterminated comment); the message says where."""


@dataclass(frozen=True, slots=True)
class Token:
    kind: TokenKind
    text: str
    start: int
    end: int

    @property
    def parts(self) -> tuple[str, ...]:
        """Components of a dotted identifier, guillemets removed (`«a.b».c` -> ("a.b", "c"))."""
        if self.kind != "ident":
            return (self.text,)
        if "«" not in self.text:
            return tuple(self.text.split("."))
        return tuple(p.strip("«»") for p in re.findall(r"«[^»]*»|[^.]+", self.text))


def _skip_block_comment(text: str, i: int) -> int:
    """``i`` points at ``/-``; returns the index after the matching ``-/`` (comments nest in Lean)."""
    depth = 0
    for mark in _BLOCK_MARK.finditer(text, i):
        depth += 1 if mark.group() == "/-" else -1
        if depth == 0:
            return mark.end()
    raise LexError(f"unterminated comment starting at offset {i}")


def tokenize(text: str) -> list[Token]:
    """Lean tokens of ``text`` with comments and whitespace dropped. Raises ``LexError`` on unterminated input."""
    tokens: list[Token] = []
    pos, n = 0, len(text)
    while pos < n:
        for m in _MASTER.finditer(text, pos):
            group = m.lastgroup or "end"
            start, end = m.start(group), m.end()
            if group in ("ident", "symbol", "number", "char", "name_literal", "hash_command"):
                if text[start] == "«" and group == "symbol":
                    raise LexError(f"unterminated «identifier» starting at offset {start}")
                tokens.append(Token(group, text[start:end], start, end))  # type: ignore[arg-type]
                continue
            if group == "end":
                pos = n
                break
            if group == "block_comment":
                pos = _skip_block_comment(text, start)
                break
            pos = _finish_string(text, m, tokens)
            break
        else:
            pos = n
    return tokens


def _finish_string(text: str, m: re.Match[str], tokens: list[Token]) -> int:
    """Close the string opened by match ``m``, append it (plus interpolated code), return where lexing resumes."""
    group = m.lastgroup or "string"
    start = m.start(group)
    if group == "string":
        close = _STRING_END.match(text, m.end())
        if close is None:
            raise LexError(f"unterminated string starting at offset {start}")
        end = close.end()
    else:
        closing = '"' + m.group("hashes")
        found = text.find(closing, m.end())
        if found < 0:
            raise LexError(f"unterminated raw string starting at offset {start}")
        end = found + len(closing)
    tokens.append(Token("string", text[start:end], start, end))
    if len(tokens) > 1 and _interpolates(tokens[-2], start):
        tokens.extend(_interpolated_code(text, start, end))
    return end


def _interpolates(prev: Token, start: int) -> bool:
    """`s!"..."`, `m!"..."`, `f!"..."`: the `{...}` pieces of the string are code."""
    return prev.kind == "ident" and prev.text.endswith("!") and prev.end == start


def _interpolated_code(text: str, start: int, end: int) -> list[Token]:
    """Tokens of the `{code}` pieces of an interpolated string such as `s!"a {f x} b"` (they are code)."""
    tokens: list[Token] = []
    j, depth, piece = start + 1, 0, 0
    while j < end - 1:
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "{":
            depth += 1
            if depth == 1:
                piece = j + 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                inner = text[piece:j]
                tokens.extend(Token(t.kind, t.text, t.start + piece, t.end + piece) for t in tokenize(inner))
        j += 1
    return tokens
