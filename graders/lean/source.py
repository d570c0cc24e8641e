"""Turn (statement, header, response) into the Lean file we check, from trusted parts only.

The response contributes only the proof and, when it restates the theorem, the helper commands it wrote before
(lemmas, definitions). The restatement must equal the given statement token for token (whitespace, comments
and binder grouping aside: `(p q : Prop)` is `(p : Prop) (q : Prop)`, as Lean itself expands it); the file
always uses the dataset's statement text. Helpers go into a fresh namespace that is opened only inside the
proof (`:= open H in ...`), so they can neither change what the statement's names mean nor leak scoped
commands (`open`, `variable`, `set_option`) into it; their imports are dropped (the header is the dataset's).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from graders.lean.lexer import LexError, Token, tokenize

# A fenced block as Markdown (CommonMark) has it: an opening line of three or more backticks or tildes with an
# optional language, up to a closing line of the same character at least as long (or the end of a truncated
# response). Matching pairs in order keeps a closing fence from being read as an opening one.
_FENCE = re.compile(
    r"^[ \t]*(?P<fence>(?P<char>[`~])(?P=char){2,})[ \t]*(?P<lang>[\w+-]*)[^\n]*\n(?P<code>.*?)"
    r"(?:^[ \t]*(?P=fence)(?P=char)*[ \t]*$|\Z)",
    re.DOTALL | re.MULTILINE,
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
        return cls(text, name, _canonical(tokens[decl:end]), span, preamble=statement[:begin])


@dataclass(frozen=True, slots=True)
class Proof:
    """The proof text to append after the statement (starts with `:=` or `by` or is a bare term)."""

    text: str
    prefix: str  # what the response wrote before its restated theorem: checked by the guard
    helpers: str = ""  # the prefix without imports: its lemmas and definitions, which the proof may use


@dataclass(frozen=True, slots=True)
class LeanFile:
    """The checked file, and the trusted `Audit.lean` that reads the axioms of its compiled theorem.

    ``name`` is the theorem's full name (header namespaces included); ``proof_line`` the 1-based line of the
    statement (followed by the proof); ``marker`` is printed right after the trusted text (before the
    response's helpers), so a run that stops after the marker stopped in the response's part of the
    file. Lines up to ``header_lines`` are the dataset's."""

    text: str
    name: str
    audit: str
    proof_line: int
    header_lines: int = 0
    marker: str = "rrl: the proof follows"
    prologue: str = ""  # the trusted first part alone (header, preamble, marker): nothing of the response


class ProofError(ValueError):
    """The response has no usable proof or changes the statement; ``reason`` is the grade reason."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


_OPENERS = {"(": ")", "{": "}", "⦃": "⦄", "[": "]"}
_CLOSERS = set(_OPENERS.values())


def _canonical(tokens: Sequence[Token]) -> tuple[str, ...]:
    """Token texts from the keyword on, `lemma` spelled `theorem`, every binder group expanded:
    `(a b : T)` -> `(a : T) (b : T)`, in the signature and in `∀`/`∃`/`fun` binders of the type alike (Lean
    elaborates a group exactly as one binder per name). Only for comparing with the statement: the checked
    file always uses the statement's own text."""
    j = 1 if tokens[0].text == "example" else 2  # binders start after the keyword and the name
    head = ["theorem" if t.text == "lemma" else t.text for t in tokens[:j]]
    return tuple(head + _expanded(tokens, j, len(tokens)))


def _expanded(tokens: Sequence[Token], start: int, stop: int) -> list[str]:
    out: list[str] = []
    j = start
    while j < stop:
        end = _group_end(tokens, j, stop) if tokens[j].text in _OPENERS else None
        if end is None:
            out.append(tokens[j].text)
            j += 1
            continue
        colon = j + 1
        while colon < end and (tokens[colon].kind == "ident" or tokens[colon].text == "_"):
            colon += 1
        if colon - (j + 1) > 1 and tokens[colon].text == ":":
            kind, close = tokens[j].text, tokens[end].text
            type_ = _expanded(tokens, colon + 1, end)
            for name in tokens[j + 1 : colon]:
                out.extend([kind, name.text, ":", *type_, close])
        else:
            out.extend([tokens[j].text, *_expanded(tokens, j + 1, end), tokens[end].text])
        j = end + 1
    return out


def _group_end(tokens: Sequence[Token], j: int, stop: int) -> int | None:
    """Index of the bracket closing the group opened at ``j`` before ``stop`` (None: unbalanced)."""
    depth = 0
    for k in range(j, stop):
        text = tokens[k].text
        if text in _OPENERS:
            depth += 1
        elif text in _CLOSERS:
            depth -= 1
            if depth == 0:
                return k if text == _OPENERS[tokens[j].text] else None
    return None


def extract_code(response: str) -> str:
    """The last ```lean (or unlabelled, `lean4`, `~~~`, ````) fenced block, an unclosed final one included;
    else the whole response."""
    blocks = [m["code"] for m in _FENCE.finditer(response) if m["lang"].lower() in _LEAN_FENCES]
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
    # Compare from the keyword on (modifiers are the trusted statement's business) up to a top-level `:=`;
    # trying each one, rather than only the first, keeps `let x := ..` inside a statement's type intact.
    assigns = _top_level_assigns(tokens, decl)
    for k in assigns:
        # A restatement has at most as many tokens as the statement once binder groups are expanded.
        if k - decl <= len(statement.tokens) and _canonical(tokens[decl:k]) == statement.tokens:
            prefix = code[: tokens[start].start]
            helpers = _without_imports(prefix, tokens[:start])
            return Proof(code[tokens[k].start :], prefix=prefix, helpers=helpers)
    restated = code[tokens[decl].start : tokens[assigns[0]].start if assigns else len(code)]
    raise ProofError("statement changed", restated.strip()[:1000])


def _without_imports(prefix: str, tokens: Sequence[Token]) -> str:
    """``prefix`` with its `prelude` and `import X` commands cut out (a file may only start with them)."""
    cuts: list[tuple[int, int]] = []
    for k, tok in enumerate(tokens):
        if tok.text == "prelude":
            cuts.append((tok.start, tok.end))
        elif tok.text == "import" and k + 1 < len(tokens):
            cuts.append((tok.start, tokens[k + 1].end))
    kept, last = [], 0
    for begin, end in cuts:
        kept.append(prefix[last:begin])
        last = end
    kept.append(prefix[last:])
    return "".join(kept).strip()


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


def _top_level_assigns(tokens: list[Token], decl: int) -> list[int]:
    """Indices of the `:=` after ``decl`` outside brackets (not those of binders such as `(x : Nat := 0)`)."""
    depth, found = 0, []
    for j in range(decl + 1, len(tokens)):
        text = tokens[j].text
        if text in ("(", "[", "{", "⦃", "⟨", "@["):
            depth += 1
        elif text in (")", "]", "}", "⦄", "⟩"):
            depth -= 1
        elif text == ":=" and depth == 0:
            found.append(j)
    return found


def namespace_at_end(text: str) -> str:
    """The namespace that is open at the end of trusted ``text`` (`namespace A.B` ... `end B`)."""
    scopes: list[list[str]] = []
    tokens = tokenize(text)
    for k, tok in enumerate(tokens):
        nxt = tokens[k + 1] if k + 1 < len(tokens) else None
        if tok.text == "namespace" and nxt is not None and nxt.kind == "ident":
            scopes.append(list(nxt.parts))
        elif tok.text in ("section", "mutual"):
            scopes.append([])
        elif tok.text == "end" and scopes:
            scopes.pop()
    return ".".join(part for scope in scopes for part in scope)


def build_file(header: str, statement: Statement, proof: Proof) -> LeanFile:
    """header + marker + [helpers in their own namespace] + statement + proof, and the audit that reads the
    compiled theorem's axioms in a separate Lean run."""
    name = statement.name or f"rrl_example_{secrets.token_hex(8)}"
    start, end = statement.keyword_span
    # The audit run names the theorem from another module, where a `private` one has no name: drop that
    # modifier (it changes nothing about what is proved).
    modifiers = re.sub(r"(?<![\w.'])private\s+", "", statement.text[:start])
    if statement.name is None:
        # `example` has no name to ask about: declare it under a fresh one (same binders, same type).
        decl_text = f"{modifiers}theorem {name}{statement.text[end:]}"
    else:
        decl_text = modifiers + statement.text[start:]
    body = proof.text.strip()
    if body.startswith(":="):
        body = body[2:].strip()
    trusted = "\n".join(part.strip("\n") for part in (header, statement.preamble) if part.strip())
    parts = [trusted.rstrip() + "\n\n" if trusted else ""]
    # The marker goes right after the trusted text, before anything of the response (its helpers included):
    # a run that stops after it stopped in the response's part, which makes that stop the response's fault.
    marker = LeanFile.__dataclass_fields__["marker"].default
    parts.append(f'#print "{marker}"\n')
    prologue = "".join(parts)
    if proof.helpers:
        scope = f"RrlHelpers{secrets.token_hex(6)}"
        parts.append(f"namespace {scope}\n{proof.helpers}\nend {scope}\n\n")
        body = f"open {scope} in\n{body}"
    head = "".join(parts)
    parts += [decl_text, " := ", body, "\n"]
    full = name.removeprefix("_root_.") if name.startswith("_root_.") else _qualified(trusted, name)
    audit = f"prelude\nimport {FILE_STEM}\n#print axioms {full}\n"
    header_lines = parts[0].rstrip("\n").count("\n") + 1 if parts[0] else 0
    return LeanFile("".join(parts), full, audit, proof_line=head.count("\n") + 1, header_lines=header_lines,
                    prologue=prologue)  # fmt: skip


FILE_STEM = "Proof"


def _qualified(trusted: str, name: str) -> str:
    namespace = namespace_at_end(trusted) if trusted else ""
    return f"{namespace}.{name}" if namespace else name
