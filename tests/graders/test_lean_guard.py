"""Pure-Python parts of the Lean grader: lexer, guard, proof extraction, file assembly, diagnostics."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from graders.lean import guard
from graders.lean.diagnostics import MalformedOutput, axiom_report, parse_messages
from graders.lean.lexer import LexError, tokenize
from graders.lean.source import ProofError, Statement, StatementError, build_file, extract_code, extract_proof

# --- lexer -----------------------------------------------------------------------------------------------


def test_lexer_drops_nested_comments_and_keeps_literals_whole() -> None:
    toks = tokenize("/- a /- sorry -/ still comment -/ exact \"sor\\\"ry\" 'x' '\\'' h' -- sorry\nrfl")
    assert [(t.kind, t.text) for t in toks] == [
        ("ident", "exact"),
        ("string", '"sor\\"ry"'),
        ("char", "'x'"),
        ("char", "'\\''"),
        ("ident", "h'"),
        ("ident", "rfl"),
    ]


def test_lexer_identifiers_numbers_and_symbols() -> None:
    toks = tokenize('Nat.succ_le.1 x.2 «my name».foo ℕ α₁ 0x1F := `Foo.bar r#"raw "# #eval!')
    assert [(t.kind, t.text) for t in toks] == [
        ("ident", "Nat.succ_le"),
        ("symbol", "."),
        ("number", "1"),
        ("ident", "x"),
        ("symbol", "."),
        ("number", "2"),
        ("ident", "«my name».foo"),
        ("ident", "ℕ"),
        ("ident", "α₁"),
        ("number", "0x1F"),
        ("symbol", ":="),
        ("name_literal", "`Foo.bar"),
        ("string", 'r#"raw "#'),
        ("hash_command", "#eval!"),
    ]
    assert toks[6].parts == ("my name", "foo")


@pytest.mark.parametrize("text", ["/- open", '"open', "/- /- -/", "«open"])
def test_lexer_rejects_unterminated_input(text: str) -> None:
    with pytest.raises(LexError, match="unterminated"):
        tokenize(text)


# --- guard: every forbidden item, and look-alikes that must pass ----------------------------------------

FORBIDDEN = [
    ("by sorry", "sorry"),
    (":= sorryAx _ false", "sorry"),
    ("by\n  intro h\n  admit", "admit"),
    ("by exact (axiom_free h)\naxiom cheat : False", "axiom declaration"),
    ("opaque cheat : False", "opaque declaration"),
    ("unsafe def x : Nat := 0", "unsafe code"),
    ("by exact unsafeCast 0", "unsafe code"),
    ("@[implemented_by foo] def x : Nat := 0", "@[implemented_by]"),
    ('@[extern "c_fn"] def x : Nat := 0', "@[extern]"),
    ("set_option debug.skipKernelTC true in\nby trivial", "set_option debug.skipKernelTC"),
    ("rfl\n#exit", "#exit"),
    ('elab "cheat" : tactic => pure ()', "elab redefinition"),
    ('macro "cheat" : tactic => `(tactic| rfl)', "macro redefinition"),
    ('syntax "cheat" : tactic', "syntax redefinition"),
    ("macro_rules | `(tactic| trivial) => `(tactic| rfl)", "macro_rules redefinition"),
    ('notation "⊤" => False', "notation redefinition"),
    ('infixl:65 " + " => HMul.hMul', "notation redefinition"),
    ("instance : Add Nat := ⟨Nat.mul⟩", "instance redefinition"),
    ("@[instance] def evil : Add Nat := ⟨Nat.mul⟩", "instance redefinition"),
    ("attribute [instance] evil in\nby rfl", "instance redefinition"),
    ('run_cmd Lean.logInfo "x"', "run_cmd at elaboration time"),
    ("by run_tac pure ()", "run_tac at elaboration time"),
    ("by_elab do return default", "elab at elaboration time"),
    ('by exact eval% (IO.getEnv "HOME")', "eval% at elaboration time"),
    ('rfl\n#eval IO.println "x"', "#eval at elaboration time"),
    ('by exact (IO.FS.readFile "/etc/passwd")', "IO at elaboration time"),
    ("by native_decide", "native_decide"),
    ("by decide +native", "decide +native"),
    ("by decide (config := { native := true })", "decide +native"),
    ("by exact Lean.ofReduceBool _ _ rfl", "native_decide"),
    ("set_option maxHeartbeats 0 in\nby simp", "set_option maxHeartbeats 0"),
    ("set_option synthInstance.maxHeartbeats 0 in\nby simp", "set_option maxHeartbeats 0"),
    ('by simp [s!"{sorry}"]', "sorry"),
]


@pytest.mark.parametrize(("text", "reason"), FORBIDDEN, ids=[r for _, r in FORBIDDEN])
def test_guard_rejects_each_forbidden_item(text: str, reason: str) -> None:
    violation = guard.check(text)
    assert violation is not None, text
    assert violation.reason == reason


# Forbidden code hidden in the `{...}` of interpolated strings, which Lean elaborates as code: after `x!`
# keywords (with or without a space), inside macros that take an interpolatedStr without `!`, nested, and
# with quotes, comments or char literals inside the code that a naive string lexer would stop at.
INTERPOLATED = [
    ('by simp [s!"{"}" ++ toString sorry}"]', "sorry"),
    ('by exact s! "{sorry}"', "sorry"),
    ('by exact (dbg_trace "{sorry}"; rfl)', "sorry"),
    ('by exact (throwError "{(sorry : Nat)}" : Id Unit)', "sorry"),
    ('by exact m!"{f!"{admit}"}"', "admit"),
    ('by exact (trace[x] "{(by native_decide : True)}"; rfl)', "native_decide"),
    ('by exact s!"{ /- } -/ sorry}"', "sorry"),
    ("by exact s!\"{'}'} {sorry}\"", "sorry"),
    ('by exact f!"{"a" ++ s!"{"}"}"} {IO.getEnv "HOME"}"', "IO at elaboration time"),
    ('by exact logInfo "{(fun _ => "}") 1} {sorry}"', "string interpolation the guard cannot read"),
    ('by exact s!"{x"', "unparsable response"),
    ("set_option maxHeartbeats 0x0 in\nby simp", "set_option maxHeartbeats 0"),
    ("set_option maxHeartbeats 0b0 in\nby simp", "set_option maxHeartbeats 0"),
    ("set_option maxHeartbeats 0o00 in\nby simp", "set_option maxHeartbeats 0"),
    ("set_option maxHeartbeats 0_000 in\nby simp", "set_option maxHeartbeats 0"),
    ("set_option «maxHeartbeats» 0 in\nby simp", "set_option maxHeartbeats 0"),
    ("set_option synthInstance.«maxHeartbeats» 0X0 in\nby simp", "set_option maxHeartbeats 0"),
    ("set_option «debug».byAsSorry true in\nby simp", "set_option «debug».byAsSorry"),
]


@pytest.mark.parametrize(("text", "reason"), INTERPOLATED, ids=[t for t, _ in INTERPOLATED])
def test_guard_reads_interpolated_strings_and_numerals_as_lean_does(text: str, reason: str) -> None:
    violation = guard.check(text)
    assert violation is not None, text
    assert violation.reason.startswith(reason), violation


@pytest.mark.parametrize(
    "text", ['by exact s!"{n} apples and {m + 1} pears"', 'by exact s!"\\{sorry} is escaped"',
             'by exact s!"{"no code: sorry"}"', "set_option maxHeartbeats 0x10 in\nby simp",
             'by exact "plain text, no braces"'],
)  # fmt: skip
def test_guard_passes_harmless_interpolation(text: str) -> None:
    assert guard.check(text) is None, text


def test_lexer_interpolated_string_spans_nested_quotes() -> None:
    toks = tokenize('s!"a {f "}" x} b" rfl')
    assert [(t.kind, t.text) for t in toks] == [
        ("ident", "s!"), ("string", 's!"a {f "}" x} b"'[2:]), ("ident", "f"), ("string", '"}"'),
        ("ident", "x"), ("ident", "rfl"),
    ]  # fmt: skip


LOOK_ALIKES = [
    "by exact h_sorry -- sorry, admit, axiom, #exit, native_decide",
    "by\n  /- nested /- sorry -/ admit axiom -/\n  exact foo",
    "/-- docs: `set_option maxHeartbeats 0`, @[implemented_by] -/\nrfl",
    'by simp [show "sorry admit axiom opaque unsafe elab macro syntax notation instance" = _ from rfl]',
    "by exact (foo 'a' '\"' \"#eval IO.println\")",
    "by exact admitted_lemma axiomatic notational instanceOf IOish ioRef",
    "by exact Nat.lt_irrefl _ (by decide)",
    "by exact (decide_eq_true (native_ok := rfl))",
    "set_option maxHeartbeats 400000 in\nby simp",
    "set_option maxHeartbeats 1000 in\nby simp",
    "open Nat in\nby simp [succ_le]",
    "open Classical Nat hiding add in\nexact em _",
    "attribute [local simp] Nat.add_comm in\nby simp",
    "by\n  have h : 1 = 1 := rfl\n  exact h",
    "fun x => x.1",
    "by simp [«sorry»]",
    'by exact r#"sorry"#',
]


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_guard_ignores_look_alikes_in_comments_strings_and_names(text: str) -> None:
    assert guard.check(text) is None


WRAPPERS: dict[str, Callable[[str], str]] = {
    "line comment": lambda t: "rfl -- " + t.replace("\n", " "),
    "block comment": lambda t: "rfl /- " + t + " -/",
    "nested comment": lambda t: "/- outer /- " + t + " -/ still -/ rfl",
    "doc comment": lambda t: "/-- " + t + " -/\nrfl",
    "string": lambda t: "by simp [show " + json.dumps(t) + " = _ from rfl]",
    "raw string": lambda t: 'by exact r#"' + t + '"#',
}


@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize(("text", "reason"), FORBIDDEN, ids=[r for _, r in FORBIDDEN])
def test_guard_ignores_each_forbidden_item_inside_comments_and_strings(
    text: str, reason: str, wrapper: str
) -> None:
    wrapped = WRAPPERS[wrapper](text)
    if wrapper == "string" and "{" in text:
        # Any `"...{code}..."` may be some macro's interpolatedStr, whose `{...}` Lean runs: checked as code.
        assert guard.check(wrapped) is not None, wrapped
        return
    assert guard.check(wrapped) is None, wrapped


@pytest.mark.parametrize(
    "text", ["rfl\ntheorem extra : True := trivial", "rfl\nnamespace X", "rfl\nopen Nat", "rfl\n#print \"x\"",
             "rfl\nend", "rfl\nset_option pp.all true", "rfl\nvariable (h : False)", "rfl\ninclude h"],
)  # fmt: skip
def test_guard_rejects_top_level_commands_in_the_proof(text: str) -> None:
    violation = guard.check(text)
    assert violation is not None and violation.reason.startswith("top-level command")


def test_guard_allows_commands_before_the_theorem_but_not_forbidden_ones() -> None:
    assert (
        guard.check("import Mathlib\nopen Real\nlemma helper : True := trivial", allow_commands=True) is None
    )
    found = guard.check("instance : Add Nat := ⟨Nat.mul⟩", allow_commands=True)
    assert found is not None and found.reason == "instance redefinition"


def test_guard_native_policy_is_configurable() -> None:
    assert guard.check("by native_decide", native="allow") is None
    assert guard.check("by decide +native", native="allow") is None


def test_guard_reports_unlexable_response() -> None:
    found = guard.check("by exact /- never closed")
    assert found is not None and found.reason.startswith("unparsable response")


# --- statement and proof extraction ----------------------------------------------------------------------

STMT = Statement.parse("theorem foo (a b : N) : Eq (add a b) (add b a)")


@pytest.mark.parametrize(
    "given", ["theorem foo (a b : N) : Eq (add a b) (add b a) := by sorry",
              "theorem foo (a b : N) : Eq (add a b) (add b a) := sorry",
              "theorem foo (a b : N) : Eq (add a b) (add b a) :="],
)  # fmt: skip
def test_statement_drops_sorry_tails(given: str) -> None:
    assert Statement.parse(given).tokens == STMT.tokens
    assert STMT.name == "foo"


def test_statement_preamble_joins_the_header() -> None:
    stmt = Statement.parse(
        "import Mathlib\nopen Real\n\nlemma helper : True := trivial\n\n@[simp] theorem foo : True"
    )
    assert (stmt.name, stmt.text, stmt.tokens) == (
        "foo",
        "@[simp] theorem foo : True",
        ("theorem", "foo", ":", "True"),
    )
    assert stmt.preamble == "import Mathlib\nopen Real\n\nlemma helper : True := trivial\n\n"
    text = build_file("", stmt, extract_proof(":= trivial", stmt)).text
    assert text.startswith("import Mathlib\nopen Real\n\nlemma helper : True := trivial\n\n")
    assert text.endswith("\n@[simp] theorem foo : True := trivial\n")


def test_statement_without_declaration_is_a_clear_error() -> None:
    with pytest.raises(StatementError, match="theorem"):
        Statement.parse("(a b : N) : Eq a b")


def test_extract_code_takes_last_fence_and_unclosed_fences() -> None:
    text = "think\n```lean\nfirst\n```\nmore\n```lean4\nsecond\n```\n"
    assert extract_code(text) == "second"
    assert extract_code("x\n```lean\ntruncated proof") == "truncated proof"
    assert extract_code("  := rfl ") == ":= rfl"
    mixed = "```lean\n:= proof\n```\nthen\n```python\nprint(1)\n```\nand more text"
    assert extract_code(mixed) == ":= proof"
    assert extract_code("```\n:= plain\n```") == ":= plain"


@pytest.mark.parametrize(
    "response",
    ["Proof:\n~~~lean\n:= Le.refl n\n~~~\ndone",
     "Proof:\n~~~\n:= Le.refl n\n~~~",
     "Proof:\n````lean4\n:= Le.refl n\n````\n",
     "Proof:\n```` lean\n:= Le.refl n\n`````",
     "Proof:\n~~~~lean\n:= Le.refl n\n~~~~~~\nand\n~~~python\nprint(1)\n~~~",
     "Proof:\n~~~LEAN4\n:= Le.refl n"],
)  # fmt: skip
def test_extract_code_reads_every_markdown_fence(response: str) -> None:
    """Tildes and longer backtick runs open a code block too (CommonMark); the fence is never fed to Lean."""
    assert extract_code(response) == ":= Le.refl n"


def test_a_shorter_fence_inside_a_longer_one_is_code() -> None:
    response = "````lean\n:= by\n  -- e.g.\n  ```\n  rfl\n````\n"
    assert extract_code(response) == ":= by\n  -- e.g.\n  ```\n  rfl"


@pytest.mark.parametrize(
    ("code", "proof", "prefix"),
    [(":= Eq.refl", ":= Eq.refl", ""),
     ("by\n  exact h", "by\n  exact h", ""),
     ("theorem foo (a b : N) : Eq (add a b) (add b a) := comm a b", ":= comm a b", ""),
     ("import Mathlib\n\ntheorem  foo (a b : N)\n  : Eq (add a b)  (add b a) :=\nby simp", ":=\nby simp",
      "import Mathlib\n\n"),
     ("lemma foo (a b : N) : Eq (add a b) (add b a) := comm a b -- lemma = theorem", ":= comm a b -- lemma = theorem",
      ""),
     ("lemma aux : True := trivial\ntheorem foo (a b : N) : Eq (add a b) (add b a) := comm a b", ":= comm a b",
      "lemma aux : True := trivial\n"),
     ("@[simp] private theorem foo (a b : N) : Eq (add a b) (add b a) := comm a b", ":= comm a b", "")],
)  # fmt: skip
def test_extract_proof_forms(code: str, proof: str, prefix: str) -> None:
    got = extract_proof(code, STMT)
    assert (got.text, got.prefix) == (proof, prefix)


@pytest.mark.parametrize(
    "code", ["theorem foo (a b : N) : Eq (add a b) (add a b) := Eq.refl",
             "theorem foo (a b : N) (h : False) : Eq (add a b) (add b a) := h.elim",
             "theorem foo' (a b : N) : Eq (add a b) (add b a) := comm a b",
             "theorem foo (a b : N) : Eq (add a b) (add b a)"],
)  # fmt: skip
def test_extract_proof_rejects_statement_changes(code: str) -> None:
    with pytest.raises(ProofError) as info:
        extract_proof(code, STMT)
    assert info.value.reason == "statement changed"


def test_restated_statement_with_let_in_its_type() -> None:
    stmt = Statement.parse("theorem t : let x := N.zero; Eq x x")
    proof = extract_proof("theorem t : let x := N.zero; Eq x x := Eq.refl", stmt)
    assert proof.text == ":= Eq.refl"
    with pytest.raises(ProofError, match="statement changed"):
        extract_proof("theorem t : let x := N.succ N.zero; Eq x x := Eq.refl", stmt)


def test_build_file_keeps_the_audit_out_of_the_checked_file() -> None:
    """The file the response's elaboration can read holds no probe, sentinel or report format: the axioms are
    read by a second Lean run on the compiled theorem (Audit.lean), written only after the first run is dead."""
    file = build_file("prelude\n", STMT, extract_proof("by\n  exact h", STMT))
    lines = file.text.splitlines()
    assert lines[0] == "prelude"
    assert lines[file.proof_line - 1].startswith("theorem foo (a b : N)")
    assert lines[file.proof_line - 2] == f'#print "{file.marker}"'
    assert "axioms" not in file.text and "rrl-axioms" not in file.text
    assert file.audit == "prelude\nimport Proof\n#print axioms foo\n"


def test_build_file_names_the_theorem_inside_the_header_namespaces() -> None:
    header = "prelude\nnamespace A.B\nsection S\nend S\nnamespace C\nend C\nmutual\nend\n"
    assert build_file(header, STMT, extract_proof(":= x", STMT)).name == "A.B.foo"
    stmt = Statement.parse("theorem _root_.top : True")
    assert build_file(header, stmt, extract_proof(":= x", stmt)).name == "top"


def test_build_file_names_examples() -> None:
    stmt = Statement.parse("example (p : Prop) (h : p) : p")
    file = build_file("", stmt, extract_proof(":= h", stmt))
    assert file.text.splitlines()[-1] == f"theorem {file.name} (p : Prop) (h : p) : p := h"


def test_helpers_before_the_restated_theorem_are_kept_in_their_own_namespace() -> None:
    code = "import Mathlib\nprelude\n-- helper\nlemma aux : True := trivial\ntheorem foo (a b : N) : Eq (add a b) (add b a) := by simp [aux]"
    proof = extract_proof(code, STMT)
    assert proof.helpers == "-- helper\nlemma aux : True := trivial"
    text = build_file("", STMT, proof).text
    scope = text.splitlines()[1].split()[1]  # after the marker, which comes before anything of the response
    marker = '#print "rrl: the proof follows"\n'
    assert text.startswith(
        f"{marker}namespace {scope}\n-- helper\nlemma aux : True := trivial\nend {scope}\n"
    )
    assert text.rstrip().endswith(f":= open {scope} in\nby simp [aux]")


@pytest.mark.parametrize(
    ("helpers", "reason"),
    [("theorem _root_.N : True := trivial", "helper declared outside its namespace (_root_)"),
     ("end\nopen Evil", "helper commands close a scope they did not open"),
     ("section\ndef x := 1", "helper commands leave a scope open"),
     ("instance : Add N := ⟨mul⟩", "instance redefinition")],
)  # fmt: skip
def test_helpers_cannot_reach_the_statement_scope(helpers: str, reason: str) -> None:
    found = guard.check(helpers, allow_commands=True)
    assert found is not None and found.reason == reason
    assert (
        guard.check("namespace X\ntheorem a : True := trivial\nend X\nmutual\nend", allow_commands=True)
        is None
    )


@pytest.mark.parametrize(
    "restated",
    ["theorem foo (a : N) (b : N) : Eq (add a b) (add b a)",
     "theorem foo (a : N)\n  (b : N) : Eq (add a b) (add b a)"],
)  # fmt: skip
def test_restatement_equal_up_to_binder_grouping(restated: str) -> None:
    assert extract_proof(restated + " := comm a b", STMT).text == ":= comm a b"
    grouped = Statement.parse("theorem t {α : Type} (x : α) (y : α) [inst : C α] : Eq x y")
    assert extract_proof("theorem t {α : Type} (x y : α) [inst : C α] : Eq x y := h", grouped).text == ":= h"
    nested = Statement.parse("theorem n : ∀ (a b : N), ∃ (c d : N), Eq (add a b) (add c d)")
    regrouped = "theorem n : ∀ (a : N) (b : N), ∃ (c : N) (d : N), Eq (add a b) (add c d) := h"
    assert extract_proof(regrouped, nested).text == ":= h"
    with pytest.raises(ProofError, match="statement changed"):  # names and binder kinds still count
        extract_proof("theorem foo (a c : N) : Eq (add a b) (add b a) := comm a b", STMT)
    with pytest.raises(ProofError, match="statement changed"):
        extract_proof("theorem foo {a b : N} : Eq (add a b) (add b a) := comm a b", STMT)


# --- diagnostics ------------------------------------------------------------------------------------------


def _msg(text: str, line: int, severity: str = "information") -> str:
    return json.dumps(
        {"severity": severity, "data": text, "pos": {"line": line, "column": 0}, "fileName": "Audit.lean"}
    )


def test_axiom_report_of_the_audit_run() -> None:
    out = _msg("'A.foo' depends on axioms: [propext,\n Classical.choice, cheat]", 3).encode()
    assert axiom_report(parse_messages(out), "A.foo") == ("propext", "Classical.choice", "cheat")
    out = _msg("'«my thm»' does not depend on any axioms", 3).encode()
    assert axiom_report(parse_messages(out), "my thm") == ()
    # A report about another theorem, or more than one report, is no report.
    assert (
        axiom_report(parse_messages(_msg("'bar' does not depend on any axioms", 3).encode()), "foo") is None
    )
    two = "\n".join([_msg("'foo' does not depend on any axioms", 3)] * 2).encode()
    assert axiom_report(parse_messages(two), "foo") is None


def test_parse_messages_rejects_non_json() -> None:
    with pytest.raises(MalformedOutput, match="line 2"):
        parse_messages(b'{"severity": "information", "data": "x"}\nSegmentation fault\n')
    with pytest.raises(MalformedOutput):
        parse_messages(b'{"unexpected": 1}\n')


def test_lean_in_sandbox_mounts_nothing() -> None:
    from graders.lean.toolchain import resolve

    toolchain = resolve(lean="/nonexistent", lean_in_sandbox="/usr/local/bin/lean-mathlib")
    assert (toolchain.lean, toolchain.mounts, toolchain.env) == ("/usr/local/bin/lean-mathlib", (), ())
