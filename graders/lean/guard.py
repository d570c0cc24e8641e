"""Reject responses that could cheat before Lean ever runs, looking at Lean tokens (never raw substrings).

Everything here is defence in depth: the axiom check after Lean runs is what finally rules out `sorry` and
injected axioms. The guard also catches what the axiom check cannot see: skipped kernel checks, code run
at elaboration time, notation/instance redefinitions that change what the statement means, and extra
top-level commands after the proof (which could spoof or suppress the axiom report).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from graders.lean.lexer import LexError, Token, tokenize

NativePolicy = Literal["reject", "allow"]

# keyword (exact token text) -> reason. Keywords cannot be written with «guillemets» (`«sorry»` is a name, not
# the keyword), so exact text is right; every other name below is compared with the token's name as Lean's
# lexer reads it (``_name``, «guillemets» stripped): `@[«implemented_by» f]` is `@[implemented_by f]` to Lean.
_KEYWORDS: dict[str, str] = {
    "sorry": "sorry",
    "admit": "admit",
    "axiom": "axiom declaration",
    "opaque": "opaque declaration",
    "unsafe": "unsafe code",
    "partial": "partial definition",
    "implemented_by": "@[implemented_by]",
    "extern": "@[extern]",
    "elab": "elab redefinition",
    "elab_rules": "elab_rules redefinition",
    "macro": "macro redefinition",
    "macro_rules": "macro_rules redefinition",
    "syntax": "syntax redefinition",
    "declare_syntax_cat": "syntax redefinition",
    "notation": "notation redefinition",
    "infix": "notation redefinition",
    "infixl": "notation redefinition",
    "infixr": "notation redefinition",
    "prefix": "notation redefinition",
    "postfix": "notation redefinition",
    "instance": "instance redefinition",
    "run_cmd": "run_cmd at elaboration time",
    "run_elab": "run_elab at elaboration time",
    "run_meta": "run_meta at elaboration time",
    "run_tac": "run_tac at elaboration time",
    "by_elab": "elab at elaboration time",
    "initialize": "initialize at elaboration time",
    "builtin_initialize": "initialize at elaboration time",
}
# Name components that reach IO, the compiler trust axiom or unsafe casts, wherever they appear.
_NAMES: dict[str, str] = {
    "sorryAx": "sorry",
    "IO": "IO at elaboration time",
    "EIO": "IO at elaboration time",
    "BaseIO": "IO at elaboration time",
    "unsafeIO": "IO at elaboration time",
    "unsafeBaseIO": "IO at elaboration time",
    "unsafeEIO": "IO at elaboration time",
    "unsafeCast": "unsafe code",
    "skipKernelTC": "set_option debug.skipKernelTC",
}
_NATIVE_NAMES = {"native_decide", "ofReduceBool", "reduceBool", "trustCompiler"}
# Attributes that register code run by the elaborator or change instance resolution.
_ATTRIBUTES = {
    "instance": "instance redefinition",
    "default_instance": "instance redefinition",
    "macro": "macro redefinition",
    "term_elab": "elab redefinition",
    "command_elab": "elab redefinition",
    "tactic": "elab redefinition",
    "implemented_by": "@[implemented_by]",
    "extern": "@[extern]",
    "export": "@[export]",
    "init": "initialize at elaboration time",
    "csimp": "@[csimp]",
}
_HASH_COMMANDS = {
    "#eval": "#eval at elaboration time",
    "#exit": "#exit",
    "#exec": "#eval at elaboration time",
}
# Tokens that can only start a top-level command: in a proof they would add commands after the theorem.
_COMMANDS = {
    "theorem", "lemma", "def", "example", "abbrev", "structure", "class", "inductive", "coinductive",
    "mutual", "namespace", "section", "end", "variable", "universe", "include", "omit", "export",
    "noncomputable", "private", "protected", "import",
}  # fmt: skip
# These are also term/tactic combinators when followed by `in`; only the command form is rejected.
_SCOPED_COMMANDS = {"open", "set_option", "attribute"}
_OPEN_CLAUSE = {"hiding", "renaming", "scoped", "(", ")", "→", "->"}


@dataclass(frozen=True, slots=True)
class Violation:
    """Why a response was rejected, and where (character offset into the checked text)."""

    reason: str
    offset: int
    token: str


def check(text: str, *, native: NativePolicy = "reject", allow_commands: bool = False) -> Violation | None:
    """The first forbidden construct in ``text``, or None. ``allow_commands`` is for text before the theorem."""
    try:
        tokens = tokenize(text)
    except LexError as exc:
        return Violation(f"unparsable response: {exc}", 0, "")
    for i, tok in enumerate(tokens):
        found = _check_token(tokens, i, native=native, allow_commands=allow_commands)
        if found is not None:
            return Violation(found, tok.start, tok.text)
    return _check_scopes(tokens) if allow_commands else None


def _check_scopes(tokens: list[Token]) -> Violation | None:
    """Helper commands stay inside the namespace the grader puts them in: no `_root_` names and no `end`
    that closes a scope they did not open (either would let them reach the statement's scope)."""
    depth = 0
    for tok in tokens:
        if tok.kind == "ident" and _components(tok)[0] == "_root_":
            return Violation("helper declared outside its namespace (_root_)", tok.start, tok.text)
        if tok.text in ("namespace", "section", "mutual"):
            depth += 1
        elif tok.text == "end":
            depth -= 1
            if depth < 0:
                return Violation("helper commands close a scope they did not open", tok.start, tok.text)
    if depth:
        return Violation("helper commands leave a scope open", tokens[-1].start, tokens[-1].text)
    return None


def _check_token(tokens: list[Token], i: int, *, native: NativePolicy, allow_commands: bool) -> str | None:
    tok = tokens[i]
    if tok.ambiguous:
        return "string interpolation the guard cannot read (a `{` whose code would end the string elsewhere)"
    if tok.kind == "hash_command":
        base = tok.text.rstrip("!?")
        return _HASH_COMMANDS.get(base) or (None if allow_commands else f"top-level command {tok.text}")
    if tok.kind != "ident":
        return None
    if tok.text in _KEYWORDS:
        return _KEYWORDS[tok.text]
    name = _name(tok)
    for part in _components(tok):
        if part in _NAMES:
            return _NAMES[part]
        if native == "reject" and part in _NATIVE_NAMES:
            return "native_decide"
    if name == "eval" and _text(tokens, i + 1) == "%":
        return "eval% at elaboration time"
    if native == "reject" and name == "native" and _is_native_config(tokens, i):
        return "decide +native"
    if tok.text == "set_option" and (reason := _check_option(tokens, i)) is not None:
        return reason
    if name in _ATTRIBUTES and _inside_attribute(tokens, i):
        return _ATTRIBUTES[name]
    if not allow_commands:
        if tok.text in _COMMANDS:
            return f"top-level command {tok.text!r} in the proof"
        if tok.text in _SCOPED_COMMANDS and not _followed_by_in(tokens, i):
            return f"top-level command {tok.text!r} in the proof"
    return None


def _components(tok: Token) -> tuple[str, ...]:
    """The components of an identifier as Lean's lexer reads them (`Foo.«bar»` -> ("Foo", "bar")); a
    «component» holding dots is split too (`«debug.skipKernelTC»`), which only ever rejects more."""
    return tuple(c for part in tok.parts for c in part.split("."))


def _name(tok: Token) -> str:
    """The identifier without «guillemets»: `«implemented_by»` -> `implemented_by`."""
    return ".".join(_components(tok))


def _text(tokens: list[Token], i: int) -> str:
    return tokens[i].text if 0 <= i < len(tokens) else ""


def _is_native_config(tokens: list[Token], i: int) -> bool:
    """`decide +native` or `decide (config := { native := v })` for any ``v`` but `false` (`true`, `Bool.true`,
    `!false`, `«true»` all say the same)."""
    value = tokens[i + 2] if i + 2 < len(tokens) else None
    assigned = _text(tokens, i + 1) == ":=" and (value is None or value.text != "false")
    return _text(tokens, i - 1) == "+" or assigned


def _check_option(tokens: list[Token], i: int) -> str | None:
    """`set_option <name> <value>`: no unlimited heartbeats, no `debug.*` options (`«guillemets»` included)."""
    if i + 1 >= len(tokens) or tokens[i + 1].kind != "ident":
        return None
    name, value = tokens[i + 1], tokens[i + 2] if i + 2 < len(tokens) else None
    if _components(name)[-1] == "maxHeartbeats" and value is not None and _nat_value(value) == 0:
        return "set_option maxHeartbeats 0"
    if _components(name)[0] == "debug":
        return f"set_option {name.text}"
    return None


def _nat_value(tok: Token) -> int | None:
    """The value of a Lean natural-number literal in any of its spellings (`0`, `0x0`, `0b0`, `0o0`, `0_0`)."""
    if tok.kind != "number":
        return None
    text = tok.text.replace("_", "").lower()
    base = {"0x": 16, "0b": 2, "0o": 8}.get(text[:2], 10)
    try:
        return int(text[2:] if base != 10 else text, base)
    except ValueError:  # a decimal with a fraction or exponent is not a Nat option value
        return None


def _inside_attribute(tokens: list[Token], i: int) -> bool:
    """True when token ``i`` sits inside `@[ ... ]` or `attribute [ ... ]`."""
    depth = 0
    for j in range(i - 1, -1, -1):
        text = tokens[j].text
        if text == "]":
            depth += 1
        elif text == "[" and depth == 0:
            return _text(tokens, j - 1) == "attribute" or _text(tokens, j - 2) == "attribute"
        elif text == "[":
            depth -= 1
        elif text == "@[":
            if depth == 0:
                return True
            depth -= 1
    return False


def _followed_by_in(tokens: list[Token], i: int) -> bool:
    """`set_option n v in`, `open A B in`, `attribute [a] n in`: scoped to the next term or tactic."""
    if tokens[i].text == "set_option":
        return _text(tokens, i + 3) == "in"
    j = i + 1
    if tokens[i].text == "attribute":
        if _text(tokens, j) != "[":
            return False
        depth = 0
        while j < len(tokens):
            depth += {"[": 1, "]": -1}.get(tokens[j].text, 0)
            j += 1
            if depth == 0:
                break
    while j < len(tokens) and (tokens[j].kind == "ident" or tokens[j].text in _OPEN_CLAUSE):
        if tokens[j].text == "in":
            return True
        j += 1
    return False
