"""Names in «guillemets»: Lean's lexer strips them from each component (`@[«implemented_by» f]` is
`@[implemented_by f]` to Lean, `Foo.«IO»` is `Foo.IO`), so the guard must read every forbidden name in that form
too. The cases are built from the guard's own tables, so a name added there is covered here."""

from __future__ import annotations

import pytest

from graders.lean import guard

ATTRIBUTE_FORMS = ["@[«{a}»] def x : Nat := 0", "@[simp, «{a}» foo] def x : Nat := 0",
                   "attribute [«{a}»] x in\nby rfl", "@[local «{a}»] def x : Nat := 0"]  # fmt: skip
NAME_FORMS = ["by exact «{n}» _", "by exact Foo.«{n}».bar", "by exact «Foo».«{n}»", "by exact «Foo.{n}» _"]

CASES = [
    *[(form.format(a=a), reason) for a, reason in guard._ATTRIBUTES.items() for form in ATTRIBUTE_FORMS],
    *[(form.format(n=n), reason) for n, reason in guard._NAMES.items() for form in NAME_FORMS],
    *[(form.format(n=n), "native_decide") for n in sorted(guard._NATIVE_NAMES) for form in NAME_FORMS],
    ("by decide +«native»", "decide +native"),
    ("by decide (config := { «native» := true })", "decide +native"),
    ("by decide (config := { native := Bool.true })", "decide +native"),
    ("set_option «debug».«skipKernelTC» true in\nby trivial", "set_option «debug».«skipKernelTC»"),
    ("set_option «debug.skipKernelTC» true in\nby trivial", "set_option «debug.skipKernelTC»"),
    ("set_option «synthInstance».«maxHeartbeats» 0 in\nby simp", "set_option maxHeartbeats 0"),
]


@pytest.mark.parametrize(("text", "reason"), CASES, ids=[t for t, _ in CASES])
def test_guard_reads_forbidden_names_in_guillemets_as_lean_does(text: str, reason: str) -> None:
    violation = guard.check(text, allow_commands=True) or guard.check(text)
    assert violation is not None, text
    assert violation.reason == reason, violation


def test_helpers_cannot_escape_their_namespace_through_guillemets() -> None:
    violation = guard.check("theorem «_root_».N : True := trivial", allow_commands=True)
    assert violation is not None and violation.reason == "helper declared outside its namespace (_root_)"


@pytest.mark.parametrize(
    "text",
    ["by simp [«sorry»]", "@[simp, «inline»] def x : Nat := 0", "by decide (config := { native := false })"],
)
def test_harmless_names_in_guillemets_still_pass(text: str) -> None:
    assert guard.check(text, allow_commands=True) is None
