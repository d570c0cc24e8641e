"""A small Lean 4 lexer: enough to tell code from comments, strings and char literals.

The guard and the statement comparison work on these tokens, so `sorry` inside `/- nested /- comments -/ -/`,
`"strings"` or `'c'` literals is never mistaken for code, and `h_sorry` is never mistaken for `sorry`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

TokenKind = Literal["ident", "number", "string", "char", "name_literal", "hash_command", "symbol"]

# Multi-character symbols that matter to us; every other symbol character is its own token.
_SYMBOLS = (":=", "@[", "=>", "<;>", "..", "::")
_NUMBER = re.compile(r"0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?")
_CHAR = re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'\n])'", re.DOTALL)
_SUBSCRIPTS = set("₀₁₂₃₄₅₆₇₈₉ₐₑₒₓₔₕₖₗₘₙₚₛₜᵢᵣᵤᵥⱼᵦᵧᵨᵩᵪ")


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
        return tuple(p.strip("«»") for p in re.findall(r"«[^»]*»|[^.]+", self.text))


def _is_id_first(ch: str) -> bool:
    # Unicode letters (ℕ, α, ...) except the binder symbols λ Π Σ, as in Lean's `isLetterLike`.
    return ch == "_" or (ch.isalpha() and ch not in "λΠΣ") or ch in _SUBSCRIPTS


def _is_id_rest(ch: str) -> bool:
    return _is_id_first(ch) or ch.isdigit() or ch in "'!?" or ch in _SUBSCRIPTS


def _skip_block_comment(text: str, i: int) -> int:
    """``i`` points at ``/-``; returns the index after the matching ``-/`` (comments nest in Lean)."""
    depth, j = 0, i
    while j < len(text):
        if text.startswith("/-", j):
            depth, j = depth + 1, j + 2
        elif text.startswith("-/", j):
            depth, j = depth - 1, j + 2
            if depth == 0:
                return j
        else:
            j += 1
    raise LexError(f"unterminated comment starting at offset {i}")


def _scan_string(text: str, i: int) -> int:
    """``i`` points at the opening quote; returns the index after the closing one."""
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
        elif text[j] == '"':
            return j + 1
        else:
            j += 1
    raise LexError(f"unterminated string starting at offset {i}")


def _scan_raw_string(text: str, i: int) -> int | None:
    """``r"..."`` / ``r#"..."#``; ``i`` points at ``r``. None when this is not a raw string."""
    m = re.compile(r'r(#*)"').match(text, i)
    if m is None:
        return None
    closing = '"' + m.group(1)
    end = text.find(closing, m.end())
    if end < 0:
        raise LexError(f"unterminated raw string starting at offset {i}")
    return end + len(closing)


def _scan_ident(text: str, i: int) -> int | None:
    """A possibly dotted identifier (`Nat.succ_le`, `«weird name».x`); None when none starts at ``i``."""
    j = i
    while True:
        if j < len(text) and text[j] == "«":
            close = text.find("»", j)
            if close < 0:
                raise LexError(f"unterminated «identifier» starting at offset {j}")
            j = close + 1
        elif j < len(text) and _is_id_first(text[j]):
            j += 1
            while j < len(text) and _is_id_rest(text[j]):
                j += 1
        else:
            return None if j == i else j - 1  # a trailing '.' is not part of the identifier
        if j + 1 < len(text) and text[j] == "." and (text[j + 1] == "«" or _is_id_first(text[j + 1])):
            j += 1
        else:
            return j


def tokenize(text: str) -> list[Token]:
    """Lean tokens of ``text`` with comments and whitespace dropped. Raises ``LexError`` on unterminated input."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if text.startswith("--", i):
            newline = text.find("\n", i)
            i = n if newline < 0 else newline + 1
            continue
        if text.startswith("/-", i):
            i = _skip_block_comment(text, i)
            continue
        start = i
        kind: TokenKind
        if ch == '"':
            kind, i = "string", _scan_string(text, i)
        elif ch == "r" and (raw_end := _scan_raw_string(text, i)) is not None:
            kind, i = "string", raw_end
        elif ch == "'" and (m := _CHAR.match(text, i)):
            kind, i = "char", m.end()
        elif ch == "`" and (ident_end := _scan_ident(text, i + 1 + text.startswith("``", i))) is not None:
            kind, i = "name_literal", ident_end
        elif ch == "#" and i + 1 < n and _is_id_first(text[i + 1]):
            i += 1
            while i < n and _is_id_rest(text[i]):
                i += 1
            kind = "hash_command"
        elif ch.isdigit() and (m := _NUMBER.match(text, i)):
            kind, i = "number", m.end()
        elif (ident_end := _scan_ident(text, i)) is not None and ident_end > i:
            kind, i = "ident", ident_end
        else:
            symbol = next((s for s in _SYMBOLS if text.startswith(s, i)), ch)
            kind, i = "symbol", i + len(symbol)
        if (
            kind == "string"
            and tokens
            and tokens[-1].kind == "ident"
            and tokens[-1].text.endswith("!")
            and tokens[-1].end == start
        ):
            tokens.append(Token(kind, text[start:i], start, i))
            tokens.extend(_interpolated_code(text, start, i))
            continue
        tokens.append(Token(kind, text[start:i], start, i))
    return tokens


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
