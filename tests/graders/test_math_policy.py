"""The math grader's extraction modes and equivalence policy, one documented rule per case."""

from __future__ import annotations

import pytest

import graders
from graders import Grade
from graders.math import MathGrader


@pytest.fixture(scope="module")
def grader() -> MathGrader:
    g = MathGrader(max_workers=2)
    g.pool.warm(1)
    return g


def _boxed(answer: str) -> str:
    return f"Some working.\n\nSo the answer is $\\boxed{{{answer}}}$."


EQUIVALENT = [
    # integers and big integers, exactly
    ("42", "42"),
    ("123456789012345678901234567890", "123456789012345678901234567890"),
    ("007", "7"),
    # fractions, decimals, mixed numbers
    ("\\frac{1}{2}", "0.5"),
    ("\\dfrac{3}{4}", "\\frac{3}{4}"),
    ("\\tfrac34", "0.75"),
    ("3/4", "\\frac{3}{4}"),
    ("-\\frac{10}{9}", "-10/9"),
    ("3\\frac12", "\\frac{7}{2}"),
    ("3\\frac{1}{2}", "3.5"),
    ("\\frac{1}{3}", "0.\\overline{3}"),
    ("\\frac{1}{6}", "0.1\\overline{6}"),
    ("1\\frac{4}{33}", "1.\\overline{12}"),
    # thousands separators
    ("1,234,567", "1234567"),
    ("12{,}345", "12345"),
    ("1 000", "1000"),
    ("11,\\!111,\\!111,\\!100", "11111111100"),
    # unicode minus, full-width digits
    ("\u22125", "-5"),
    ("\uff14\uff12", "42"),
    # percentages, degrees, units, currency
    ("50\\%", "50"),
    ("50\\%", "0.5"),
    ("50", "50\\%"),
    ("90^\\circ", "90"),
    ("90^{\\circ}", "90"),
    ("15\\text{ cm}^2", "15"),
    ("125\\textnormal{ miles}", "125"),
    ("\\$16.50", "16.50"),
    ("16.5 dollars", "16.50"),
    # symbolic equivalence
    ("3\\sqrt{13}", "\\sqrt{117}"),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"),
    ("2\\pi", "\\pi \\cdot 2"),
    ("e^{2}", "\\mathrm{e}^2"),
    ("\\ln 8", "3\\ln 2"),
    ("1", "\\sin^2 x + \\cos^2 x"),
    ("\\tan^2(y)+1", "\\sec^2(y)"),
    ("5!", "120"),
    ("\\binom{5}{2}", "10"),
    ("3+4i", "4i+3"),
    ("x^2+2x+1", "(x+1)^2"),
    # precision the gold states
    # tuples, sets, lists, \pm
    ("(1,2)", "(1, 2)"),
    ("\\{1,2,3\\}", "\\{3,2,1\\}"),
    ("2, 3", "3, 2"),
    ("x=2 \\text{ or } x=3", "3, 2"),
    ("1 \\pm \\sqrt{19}", "1+\\sqrt{19}, 1-\\sqrt{19}"),
    # intervals and unions
    ("[0, 1)", "[0,1)"),
    ("(-\\infty, 2] \\cup (3, \\infty)", "(3,\\infty) \\cup (-\\infty,2]"),
    # matrices
    ("\\begin{pmatrix}1 & 2 \\\\ 3 & 4\\end{pmatrix}", "\\begin{bmatrix}1 & 2 \\\\ 3 & 4\\end{bmatrix}"),
    # equations, assignments, inequalities
    ("4", "x = 4"),
    ("x = 4", "4"),
    ("y=2x+1", "y=1+2x"),
    ("a_3 = 2, a_{37} = 19", "a_{37} = 19, a_3 = 2"),
    ("p=5,q=2; p=7,q=2", "(7,2), (5,2)"),
    ("(p,q)=(3,2)", "(3, 2)"),
    ("x \\geq 5", "5 \\le x"),
    ("x < 3", "x \\lt 3"),
    # text answers and MCQ letters
    ("\\text{Evelyn}", "evelyn"),
    ("\\text{(C)}", "C"),
    ("odd", "\\text{Odd}"),
]

NOT_EQUIVALENT = [
    ("\\frac{1}{2^{100}}", "\\frac{1}{2^{101}}"),
    ("\\frac{1}{100!}", "\\frac{1}{101!}"),
    ("100000", "100001"),
    ("50", "5000"),
    ("1-\\frac{1}{\\mathrm{e}}", "1+\\frac{1}{\\mathrm{e}}"),
    ("1-\\frac{1}{\\mathrm{e}}", "1-\\frac{1}{}"),
    ("(1,2)", "(2,1)"),
    ("[0,1)", "(0,1)"),
    ("[0,1)", "[0,1]"),
    ("2", "1, 2, 3"),
    ("1, 2", "1, 2, 3"),
    ("\\pm 2021", "2021"),
    ("4", "4\\sqrt{2}"),
    ("x > 5", "x < 5"),
    ("(a+5)(b+2)", "(+5)(b+2)"),
    ("x+2n+1", "x+1"),
    ("a_3 = 2, a_{37} = 19", "a_3 = 19, a_{37} = 2"),
    ("p=5,q=2; p=7,q=2", "(2,5), (2,7)"),
    ("C", "D"),
    ("0.5", "0.56"),
    ("0.5", "0.6"),
    ("1000", "1000.4"),
    ("32349", "32, 349"),
    ("\\frac{1}{3}", "0.3"),
    ("\\begin{pmatrix}1 & 2 \\\\ 3 & 4\\end{pmatrix}", "\\begin{pmatrix}1 & 2 \\\\ 3 & 5\\end{pmatrix}"),
]


@pytest.mark.parametrize(("gold", "pred"), EQUIVALENT)
def test_equivalent_forms_are_correct(grader: MathGrader, gold: str, pred: str) -> None:
    result = grader.grade(_boxed(pred), gold, timeout_s=10.0)
    assert result.verdict == "correct", result


@pytest.mark.parametrize(("gold", "pred"), NOT_EQUIVALENT)
def test_different_answers_are_incorrect(grader: MathGrader, gold: str, pred: str) -> None:
    result = grader.grade(_boxed(pred), gold, timeout_s=10.0)
    assert result.verdict == "incorrect", result


def test_registered_and_reachable_through_graders_grade() -> None:
    result = graders.grade("math", "\\boxed{4}", "4", mode="strict")
    assert isinstance(result, Grade) and result.verdict == "correct"
    assert graders.get("math").name == "math"


def test_details_say_what_was_extracted_and_how(grader: MathGrader) -> None:
    result = grader.grade("so $\\boxed{\\frac{6}{4}}$", "1.5")
    assert result.details["extracted"] == ["\\frac{6}{4}"]
    assert result.details["gold"] == "1.5"
    assert result.details["rule"] == "boxed"
    assert result.details["matched_by"] == "fast"


STRICT_VS_LENIENT = [
    # (response, gold, strict verdict, lenient verdict)
    ("The answer is 42.", "42", "incorrect", "correct"),
    ("Answer: $\\frac{1}{2}$", "0.5", "incorrect", "correct"),
    ("Natalia sold 48 clips.\n#### 72", "72", "incorrect", "correct"),
    ("So we get 3 + 4 = 7", "7", "incorrect", "correct"),
    ("The correct option is (B).", "B", "incorrect", "correct"),
    ("<think>maybe 5</think> The result is \\boxed{6}", "6", "correct", "correct"),
    ("<think>so \\boxed{6}</think> The result is \\boxed{5}", "6", "incorrect", "incorrect"),
    ("\\boxed 5", "5", "correct", "correct"),
    ("**Answer:** $\\boxed{**12**}$.", "12", "correct", "correct"),
    ("The answer is **x = 5**.", "5", "incorrect", "correct"),
    ("\\fbox{5}", "5", "correct", "correct"),
    ("**Final answer:** $\\boxed{\\{1, 2\\}}$.", "\\{1,2\\}", "correct", "correct"),
    ("$\\boxed{\\frac{a}{\\sqrt{b^{2}}}}$", "\\frac{a}{\\sqrt{b^2}}", "correct", "correct"),
    ("the roots are $\\boxed{2}$ and $\\boxed{3}$", "2, 3", "correct", "correct"),
    ("first $\\boxed{4}$, finally $\\boxed{4.0}$", "4", "correct", "correct"),
]


@pytest.mark.parametrize(("response", "gold", "strict", "lenient"), STRICT_VS_LENIENT)
def test_extraction_modes(grader: MathGrader, response: str, gold: str, strict: str, lenient: str) -> None:
    assert grader.grade(response, gold, mode="strict", timeout_s=10.0).verdict == strict
    assert grader.grade(response, gold, mode="lenient", timeout_s=10.0).verdict == lenient


def test_gold_first_policy_is_not_symmetric(grader: MathGrader) -> None:
    # An interval gold wants an interval; an inequality gold accepts the interval it describes.
    assert grader.grade("$\\boxed{x \\in [-2, 7]}$", "-2 \\le x \\le 7", timeout_s=10.0).verdict == "correct"
    assert grader.grade("$\\boxed{-2 \\le x \\le 7}$", "[-2, 7]", timeout_s=10.0).verdict == "incorrect"
    # A decimal is the number it writes: no rounding either way unless asked for (see below).
    assert grader.grade("\\boxed{2.718}", "2.72").verdict == "incorrect"
    assert grader.grade("\\boxed{2.72}", "2.718").verdict == "incorrect"


# Values close to the gold but not equal to it: every mode rejects them by default.
NEAR_MISSES = [
    ("3^{100}", "3^{100}+1"),  # a relative tolerance would call these equal
    ("2^{200}", "2^{200}-1"),
    ("\\pi", "\\pi+10^{-50}"),
    ("\\pi", "\\sqrt{\\pi^2+e^{-300}}"),
    ("\\frac{1}{100!}", "\\frac{1}{100!}+\\frac{1}{10^{200}}"),
    ("0.5", "0.54"),  # rounds to the decimal gold, but is another number
    ("16386.17", "16386.169"),
    ("\\pi", "3.14"),  # rounded values of exact irrational or repeating golds
    ("\\frac{1}{3}", "0.33"),
    ("\\sqrt{2}", "1.41"),
    ("\\frac{1}{12}", "0.0833333"),
    ("4.123105625617661", "\\sqrt{17}"),
]


@pytest.mark.parametrize(("gold", "pred"), NEAR_MISSES)
@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_near_misses_are_incorrect_in_every_mode(grader: MathGrader, gold: str, pred: str, mode: str) -> None:
    result = grader.grade(_boxed(pred), gold, mode=mode, timeout_s=10.0)
    assert result.verdict == "incorrect", result


@pytest.mark.parametrize(
    ("gold", "pred", "decimals", "verdict"),
    [("\\pi", "3.14", 2, "correct"), ("\\pi", "3.15", 2, "incorrect"), ("\\pi", "3.14", 3, "incorrect"),
     ("\\frac{1}{3}", "0.33", 2, "correct"), ("\\frac{1}{3}", "0.333", 2, "correct"),
     ("\\sqrt{2}", "1.41", 2, "correct"), ("\\frac{1}{12}", "0.0833333", 2, "correct"),
     ("0.5", "0.54", 1, "correct"), ("0.5", "0.56", 1, "incorrect"), ("0.33", "\\frac{1}{3}", 2, "correct"),
     ("4.123105625617661", "\\sqrt{17}", 2, "correct"),
     ("100000", "99999.9", 1, "incorrect"), ("7", "7.04", 1, "incorrect")],  # integer golds stay exact
)  # fmt: skip
def test_lenient_rounding_only_under_the_explicit_option(
    grader: MathGrader, gold: str, pred: str, decimals: int, verdict: str
) -> None:
    result = grader.grade(_boxed(pred), gold, mode="lenient", rounded_decimals=decimals, timeout_s=10.0)
    assert result.verdict == verdict, result


def test_rounding_option_is_lenient_only(grader: MathGrader) -> None:
    result = grader.grade(_boxed("3.14"), "\\pi", mode="strict", rounded_decimals=2)
    assert result.verdict == "error" and "needs mode='lenient'" in result.reason
    assert "from 1 to 50" in grader.grade(_boxed("3.14"), "\\pi", mode="lenient", rounded_decimals=0).reason


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"mode": "loose"}, "mode must be one of"),
        ({"timeout_s": 0}, "timeout_s must be a positive number"),
        ({"colour": "red"}, "unknown option"),
    ],
)
def test_bad_options_are_clear_errors(grader: MathGrader, options: dict[str, object], needle: str) -> None:
    result = grader.grade("\\boxed{1}", "1", **options)  # type: ignore[arg-type]
    assert result.verdict == "error" and needle in result.reason


def test_bad_argument_types_are_clear_errors(grader: MathGrader) -> None:
    assert "response must be a string" in grader.grade(None, "1").reason  # type: ignore[arg-type]
    assert "ground_truth must be" in grader.grade("\\boxed{1}", object()).reason
    assert grader.grade("\\boxed{1}", "").reason == "ground truth is empty"
    assert grader.grade("\\boxed{7}", 7).verdict == "correct"
    assert "longer than" in grader.grade("\\boxed{7}", "7" * 10_000).reason


# Low-level policies (issue 15), one rule each; docs in graders/math/README-level docstrings and the README.
@pytest.mark.parametrize(
    ("pred", "gold", "verdict"),
    [("7 \\text{ or 8}", "7", "incorrect"),  # only unit words trail as a unit; other words are the answer
     ("7 \\text{ cm}", "7", "correct"), ("7\\text{ square units}", "7", "correct"),
     ("5 \\text{ m}", "5 \\text{ cm}", "incorrect"),  # both sides state units: they must be the same unit
     ("5 m", "5 cm", "incorrect"), ("100 cm", "1 m", "incorrect"),  # no unit conversion
     ("5", "5 \\text{ cm}", "correct"), ("5 cm", "5", "correct"),  # a unit on one side only is not compared
     ("5 \\text{ centimeters}", "5 cm", "correct"), ("15 \\text{ cm}^2", "15 square centimeters", "correct"),
     ("60 km/h", "60 \\text{ kilometers per hour}", "correct")],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_trailing_text_and_units(grader: MathGrader, pred: str, gold: str, verdict: str, mode: str) -> None:
    assert grader.grade(_boxed(pred), gold, mode=mode, timeout_s=10.0).verdict == verdict


@pytest.mark.parametrize(
    ("pred", "gold", "strict", "lenient"),
    [("8 = 7", "7", "incorrect", "correct"),  # strict: a false chain is no answer; lenient: Math-Verify's reading
     ("2+2 = 5", "5", "incorrect", "correct"),
     ("x = 5+5+1 = 11", "11", "correct", "correct"), ("\\frac{1}{2} = 0.5", "0.5", "correct", "correct")],
)  # fmt: skip
def test_chains_commit_to_their_last_part_only_when_true_in_strict_mode(
    grader: MathGrader, pred: str, gold: str, strict: str, lenient: str
) -> None:
    assert grader.grade(_boxed(pred), gold, mode="strict", timeout_s=10.0).verdict == strict
    assert grader.grade(_boxed(pred), gold, mode="lenient", timeout_s=10.0).verdict == lenient


def test_long_lists_are_never_cut(grader: MathGrader) -> None:
    """A list past the 64-item cap is refused, not truncated (a cut 70-item answer used to match 64 golds)."""
    gold = ",".join(str(i) for i in range(64))  # under 200 characters: read as an answer, not a solution
    result = grader.grade(_boxed(",".join(str(i) for i in range(70))), gold)
    assert (result.verdict, result.reason) == ("incorrect", "answer has too many items to judge"), result
    assert grader.grade(_boxed(gold), gold).verdict == "correct"
    result = grader.grade(_boxed("1"), ",".join(str(i) for i in range(65)))
    assert (result.verdict, result.reason) == ("error", "ground truth has too many items to judge"), result


@pytest.mark.parametrize(
    ("response", "gold", "verdict"),
    [
        ("The answer is obvious", "12", "incorrect"),  # issue 30: read as the answer `obvious` before
        ("The answer is obvious. We get 12 in the end.", "12", "correct"),  # the words fall through to 12
        ("The answer is very clear, so 7 it is", "7", "correct"),
        ("The answer is x", "x", "correct"),  # a variable is an answer
        ("The answer is B", "B", "correct"),  # so is a letter
        ("The answer is pi", "pi", "correct"),  # and a word that names a number
    ],
)
def test_lenient_mode_takes_no_word_as_the_answer(
    grader: MathGrader, response: str, gold: str, verdict: str
) -> None:
    from graders.math.extract import extract

    grade = grader.grade(response, gold, mode="lenient")
    assert grade.verdict == verdict, grade
    if response == "The answer is obvious":
        assert extract(response, "lenient").answers == ()
