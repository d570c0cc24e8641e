"""Property tests: equal numbers in any form are correct, distinct rationals incorrect, nothing ever raises."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graders import Grade
from graders.math import MathGrader

GRADER = MathGrader(max_workers=2)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

rationals = st.fractions(min_value=-(10**6), max_value=10**6, max_denominator=10**4)


def _forms(value: Fraction) -> list[str]:
    """Ways a person writes ``value`` exactly."""
    p, q = value.numerator, value.denominator
    sign = "-" if p < 0 else ""
    forms = [
        f"\\frac{{{p}}}{{{q}}}",
        f"{p}/{q}",
        f"\\dfrac{{{p}}}{{{q}}}",
        f"{sign}\\frac{{{abs(p)}}}{{{q}}}",
    ]
    if q == 1:
        forms += [str(p), f"{p}.0", f"{p:,}", f"{p:,}".replace(",", "{,}")]
    else:
        whole, rest = divmod(abs(p), q)
        if whole:
            forms.append(f"{sign}{whole}\\frac{{{rest}}}{{{q}}}")
    twos_fives = q
    for f in (2, 5):
        while twos_fives % f == 0:
            twos_fives //= f
    if twos_fives == 1:  # terminating decimal: write it out exactly
        digits = 0
        while (value * 10**digits).denominator != 1:
            digits += 1
        forms.append(f"{float(value):.{digits}f}" if digits < 15 else f"\\frac{{{p}}}{{{q}}}")
    return forms


@SETTINGS
@given(value=rationals, data=st.data())
def test_equal_numbers_in_different_forms_are_correct(value: Fraction, data: st.DataObject) -> None:
    forms = _forms(value)
    gold = data.draw(st.sampled_from(forms), label="gold")
    pred = data.draw(st.sampled_from(forms), label="pred")
    result = GRADER.grade(f"The answer is $\\boxed{{{pred}}}$.", gold, timeout_s=10.0)
    assert result.verdict == "correct", (gold, pred, result)


@SETTINGS
@given(a=rationals, b=rationals, data=st.data())
def test_distinct_rationals_are_incorrect(a: Fraction, b: Fraction, data: st.DataObject) -> None:
    if a == b:
        b = a + Fraction(1, 10**6)
    # The gold is written exactly: a decimal gold like "0.0" states a precision, and within it "1/10^6" is right.
    gold = data.draw(st.sampled_from([f for f in _forms(a) if "." not in f]), label="gold")
    pred = data.draw(st.sampled_from(_forms(b)), label="pred")
    result = GRADER.grade(f"$\\boxed{{{pred}}}$", gold, timeout_s=10.0)
    assert result.verdict == "incorrect", (gold, pred, result)


TOKENS = list("0123456789+-*/^_=<>()[]{},.;:!|$% abcxyzABC\n\\") + [
    "\\frac",
    "\\boxed",
    "\\sqrt",
    "\\pi",
    "\\text",
    "\\left(",
    "\\right)",
    "\\cup",
    "\\pm",
    "</think>",
    "<think>",
    "\\infty",
    "\\begin{pmatrix}",
    "\\end{pmatrix}",
    "&",
    "\\\\",
    "\\le",
    "\\in",
    "\\mathrm{e}",
]
LATEXISH = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)


@SETTINGS
@given(response=st.one_of(st.text(max_size=80), LATEXISH), gold=st.one_of(st.text(max_size=20), LATEXISH))
@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_no_exception_escapes_grade(mode: str, response: str, gold: str) -> None:
    result = GRADER.grade(response, gold, mode=mode, timeout_s=2.0)
    assert isinstance(result, Grade)
    assert result.score in (0.0, 1.0)
