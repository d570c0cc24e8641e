"""A small Lean 4 lexer: enough to tell code from comments, strings and char literals.

The guard and the statement comparison work on these tokens, so `sorry` inside `/- nested /- comments -/ -/`,
`"strings"` or `'c'` literals is never mistaken for code, and `h_sorry` is never mistaken for `sorry`.
One compiled regex does the common cases, so a 100 KB response lexes in tens of milliseconds.

Interpolated strings are read the way Lean's `interpolatedStr` parser reads them: a `{` opens code (which may
hold strings, comments and further interpolations, so a `"` there does not end the string) up to its `}`.
Lean decides by syntax position whether a string is interpolated: always after an `x!` keyword (`s!`, `m!`,
`f!`, with or without a space), and in macros such as `dbg_trace "{e}"`, `throwError "{e}"` or
`trace[c] "{e}"`, which a lexer cannot list exhaustively. So every other string holding a `{` is read both
ways: when the two readings end at the same quote, the `{...}` pieces are returned as code too (the guard
checks them); when they do not, the token is marked ``ambiguous`` and the guard rejects it.
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
_PIECE = re.compile(r'(?:[^"\\{]|\\.)*', re.DOTALL)  # literal part of an interpolated string


class LexError(ValueError):
    """Text that Lean itself could not lex (e.g. an unterminated comment); the message says where."""


@dataclass(frozen=True, slots=True)
class Token:
    kind: TokenKind
    text: str
    start: int
    end: int
    # A string whose `{...}` reading (as Lean's interpolatedStr) ends elsewhere than its plain reading.
    ambiguous: bool = False

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
    _lex(text, 0, tokens, in_braces=False)
    return tokens


def _lex(text: str, pos: int, tokens: list[Token], *, in_braces: bool) -> int:
    """Append the tokens of ``text[pos:]``; with ``in_braces`` stop at the `}` that closes an interpolation
    (returning its index; raising ``LexError`` if there is none), else lex to the end."""
    n, depth = len(text), 0
    while pos < n:
        for m in _MASTER.finditer(text, pos):
            group = m.lastgroup or "end"
            start, end = m.start(group), m.end()
            if group in ("ident", "symbol", "number", "char", "name_literal", "hash_command"):
                if text[start] == "«" and group == "symbol":
                    raise LexError(f"unterminated «identifier» starting at offset {start}")
                if in_braces and group == "symbol" and text[start] in "{}":
                    if text[start] == "}" and depth == 0:
                        return start
                    depth += 1 if text[start] == "{" else -1
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
    if in_braces:
        raise LexError("unterminated `{` in an interpolated string")
    return n


def _finish_string(text: str, m: re.Match[str], tokens: list[Token]) -> int:
    """Close the string opened by match ``m``, append it (plus interpolated code), return where lexing resumes."""
    group = m.lastgroup or "string"
    start = m.start(group)
    if group != "string":  # raw strings have no escapes and no interpolation
        closing = '"' + m.group("hashes")
        found = text.find(closing, m.end())
        if found < 0:
            raise LexError(f"unterminated raw string starting at offset {start}")
        end = found + len(closing)
        tokens.append(Token("string", text[start:end], start, end))
        return end
    if tokens and _interpolates(tokens[-1]):
        code: list[Token] = []
        end = _interpolated(text, start, code)
        tokens.append(Token("string", text[start:end], start, end))
        tokens.extend(code)
        return end
    close = _STRING_END.match(text, m.end())
    if close is None:
        raise LexError(f"unterminated string starting at offset {start}")
    end = close.end()
    if "{" not in text[start:end]:
        tokens.append(Token("string", text[start:end], start, end))
        return end
    # Maybe an interpolatedStr of some macro: its `{...}` pieces are code whenever Lean reads it so.
    code = []
    try:
        same = _interpolated(text, start, code) == end
    except LexError:
        same = False
    tokens.append(Token("string", text[start:end], start, end, ambiguous=not same))
    if same:
        tokens.extend(code)
    return end


def _interpolates(prev: Token) -> bool:
    """`s!"..."`, `m!"..."`, `f!"..."` (and `s! "..."`): after an `x!` keyword a string is interpolated."""
    return prev.kind == "ident" and prev.text.endswith("!")


def _interpolated(text: str, start: int, code: list[Token]) -> int:
    """Read the interpolated string at ``text[start] == '"'`` as Lean does; append the tokens of its `{...}`
    pieces to ``code`` and return the index after the closing quote."""
    i, n = start + 1, len(text)
    while True:
        piece = _PIECE.match(text, i)
        i = piece.end() if piece else i
        if i < n and text[i] == '"':
            return i + 1
        if i >= n or text[i] != "{":  # the end of the text, or a lone backslash before it
            raise LexError(f"unterminated string starting at offset {start}")
        i = _lex(text, i + 1, code, in_braces=True) + 1  # code up to the `}` that closes this `{`
