"""Turn (statement, header, response) into the Lean file we check, from trusted parts only.

The response contributes only the proof. When it restates the theorem, the restatement must equal the given
statement token for token (whitespace and comments aside); whatever it wrote before the theorem (imports, its
own header, helper commands) is dropped, because the header is the dataset's, never the model's.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from graders.lean.lexer import LexError, Token, tokenize

# A fenced block: an opening ``` line with an optional language, up to the closing ``` line (or the end of a
# truncated response). Matching pairs in order keeps a closing fence from being read as an opening one.
_FENCE = re.compile(
    r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.DOTALL | re.MULTILINE
)
_LEAN_FENCES = ("", "lean", "lean4")
_DECL_KEYWORDS = ("theorem", "lemma", "example")
_SORRY_TAIL = (":=", "by", "sorry")


class StatementError(ValueError):
    """The ground truth's statement is not a single `theorem`/`lemma`/`example` header."""


@dataclass(frozen=True, slots=True)
class Statement:
    """A normalised formal statement: its text without any `:= sorry` tail, and the declared name."""

    text: str  # from the declaration's modifiers on
    name: str | None  # None for `example`, which the file renames so that its axioms can be printed
    tokens: tuple[str, ...]  # from the keyword on, `lemma` spelled `theorem`
    keyword_span: tuple[int, int]  # where `theorem`/`lemma`/`example` sits in ``text``
    preamble: str = ""  # trusted text the dataset put before the declaration (imports, opens, helpers)

    @classmethod
    def parse(cls, statement: str) -> Statement:
        try:
            tokens = tokenize(statement)
        except LexError as exc:
            raise StatementError(f"ground_truth['statement'] does not lex: {exc}") from exc
        # The last declaration is the statement; anything before it (imports, helpers) joins the header.
        decl = next((i for i in reversed(range(len(tokens))) if tokens[i].text in _DECL_KEYWORDS), None)
        if decl is None:
            raise StatementError("ground_truth['statement'] must contain `theorem`, `lemma` or `example`")
        end = len(tokens)
        # Datasets (miniF2F, ...) often ship `... := by sorry` or `... :=`: cut that tail off.
        for tail_len in (3, 2, 1):
            tail = tuple(t.text for t in tokens[-tail_len:])
            if tail in (_SORRY_TAIL, (":=", "sorry"), (":=",), (":=", "by")):
                end = len(tokens) - tail_len
                break
        if end <= decl + 1:
            raise StatementError("ground_truth['statement'] has no name or type after its keyword")
        begin = tokens[_declaration_start(tokens, decl)].start
        text = statement[begin : tokens[end - 1].end]
        name = None if tokens[decl].text == "example" else tokens[decl + 1].text
        span = (tokens[decl].start - begin, tokens[decl].end - begin)
        canonical = tuple(_canonical(t) for t in tokens[decl:end])
        return cls(text, name, canonical, span, preamble=statement[:begin])


@dataclass(frozen=True, slots=True)
class Proof:
    """The proof text to append after the statement (starts with `:=` or `by` or is a bare term)."""

    text: str
    prefix: str  # what the response wrote before its restated theorem: checked by the guard, never run


@dataclass(frozen=True, slots=True)
class LeanFile:
    """The checked file; 1-based lines of the statement (followed by the proof) and of our `#print axioms`."""

    text: str
    name: str
    sentinel: str
    axioms_line: int
    proof_line: int


class ProofError(ValueError):
    """The response has no usable proof or changes the statement; ``reason`` is the grade reason."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def _canonical(tok: Token) -> str:
    return "theorem" if tok.text == "lemma" else tok.text


def extract_code(response: str) -> str:
    """The last ```lean (or unlabelled) fenced block, an unclosed final one included; else the whole response."""
    blocks = [code for lang, code in _FENCE.findall(response) if lang.lower() in _LEAN_FENCES]
    return (blocks[-1] if blocks else response).strip()


def extract_proof(code: str, statement: Statement) -> Proof:
    """The proof part of ``code``; raises ``ProofError`` when the restated statement differs."""
    try:
        tokens = tokenize(code)
    except LexError as exc:
        raise ProofError("unparsable response", str(exc)) from exc
    if not tokens:
        raise ProofError("empty response")
    decls = [i for i, t in enumerate(tokens) if t.text in _DECL_KEYWORDS]
    if not decls:
        return Proof(code, prefix="")
    # The restated theorem is the declaration that carries the statement's name (or the last one).
    named = [i for i in decls if statement.name is not None and _text(tokens, i + 1) == statement.name]
    decl = named[-1] if named else decls[-1]
    start = _declaration_start(tokens, decl)
    # Compare from the keyword on (modifiers are the trusted statement's business), then expect `:=`.
    # Matching the known statement first, rather than splitting at the first `:=`, keeps `let x := ..`
    # inside a statement's type intact.
    end = decl + len(statement.tokens)
    if tuple(_canonical(t) for t in tokens[decl:end]) == statement.tokens and _text(tokens, end) == ":=":
        return Proof(code[tokens[end].start :], prefix=code[: tokens[start].start])
    assign = _top_level_assign(tokens, decl)
    restated = code[tokens[decl].start : tokens[assign].start if assign is not None else len(code)]
    raise ProofError("statement changed", restated.strip()[:1000])


def _text(tokens: list[Token], i: int) -> str:
    return tokens[i].text if 0 <= i < len(tokens) else ""


def _declaration_start(tokens: list[Token], decl: int) -> int:
    """Include modifiers and attributes written before the keyword (`@[simp] private theorem`)."""
    start = decl
    while start > 0 and tokens[start - 1].text in ("private", "protected", "nonrec", "noncomputable"):
        start -= 1
    if start > 0 and tokens[start - 1].text == "]":
        depth = 0
        for j in range(start - 1, -1, -1):
            depth += {"]": 1, "[": -1, "@[": -1}.get(tokens[j].text, 0)
            if depth == 0:
                return j if tokens[j].text == "@[" else start
    return start


def _top_level_assign(tokens: list[Token], decl: int) -> int | None:
    """Index of the `:=` that ends the signature (not one inside binders such as `(x : Nat := 0)`)."""
    depth = 0
    for j in range(decl + 1, len(tokens)):
        text = tokens[j].text
        if text in ("(", "[", "{", "⦃", "⟨", "@["):
            depth += 1
        elif text in (")", "]", "}", "⦄", "⟩"):
            depth -= 1
        elif text == ":=" and depth == 0:
            return j
    return None


def build_file(header: str, statement: Statement, proof: Proof) -> LeanFile:
    """header + statement + proof + the axiom probe between two unguessable sentinels."""
    sentinel = f"rrl-axioms-{secrets.token_hex(16)}"
    name = statement.name or f"rrl_example_{secrets.token_hex(8)}"
    decl_text = statement.text
    if statement.name is None:
        # `example` has no name to ask about: declare it under a fresh one (same binders, same type).
        start, end = statement.keyword_span
        decl_text = f"{decl_text[:start]}theorem {name}{decl_text[end:]}"
    body = proof.text.strip()
    if not body.startswith(":="):
        body = ":= " + body
    trusted = "\n".join(part.strip("\n") for part in (header, statement.preamble) if part.strip())
    head = trusted.rstrip() + "\n\n" if trusted else ""
    parts = [head, decl_text, " ", body, "\n\n"]
    prefix = "".join(parts)
    proof_line = head.count("\n") + 1
    axioms_line = prefix.count("\n") + 2
    probe = f'#print "{sentinel}:begin"\n#print axioms {name}\n#print "{sentinel}:end"\n'
    return LeanFile(prefix + probe, name, sentinel, axioms_line, proof_line)
