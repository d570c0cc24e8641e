"""The `lean` grader: guard the response, build the file from trusted parts, compile it with `lean --json` in a
sandbox, then read the compiled theorem's axioms in a second, trusted Lean run (``_driver.py``: started warm
while the compile runs, out of the response's reach), and accept only error-free, sorry-free proofs whose
axioms are all allowed.

Verdicts follow the rule in ``graders.types.Grade``: a proof that times out, overflows the stack, runs out of
memory or crashes Lean after the trusted header went through is ``incorrect``; a toolchain that fails on the
header, prints no JSON or a sandbox that fails is ``error``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from graders.lean import guard
from graders.lean.diagnostics import MalformedOutput, Message, axiom_report, parse_messages
from graders.lean.source import (
    FILE_STEM,
    LeanFile,
    ProofError,
    Statement,
    build_file,
    extract_code,
    extract_proof,
)
from graders.lean.toolchain import Toolchain, ToolchainError, resolve
from graders.types import Grade
from sandboxes import Limits, RunRequest, RunResult, Sandbox, open_sandbox

DEFAULT_AXIOMS: tuple[str, ...] = ("propext", "Classical.choice", "Quot.sound")
NATIVE_AXIOMS: tuple[str, ...] = ("Lean.ofReduceBool", "Lean.trustCompiler")
FILE_NAME = f"{FILE_STEM}.lean"
DRIVER = "rrl_lean_driver.py"
_DRIVER_TEXT = (Path(__file__).with_name("_driver.py")).read_text()
_FRAME = "rrl-lean-audit "
_MAX_MESSAGES = 20
_MAX_SOUND = 1024


@lru_cache(maxsize=4096)
def _statement(text: str) -> Statement:
    return Statement.parse(text)


def _ground_truth(ground_truth: Any) -> tuple[str, str]:
    """(statement, header) from a dict with `statement` (+ optional `header`) or a bare statement string."""
    if isinstance(ground_truth, str):
        return ground_truth, ""
    if isinstance(ground_truth, Mapping):
        statement, header = ground_truth.get("statement"), ground_truth.get("header") or ""
        if not isinstance(statement, str) or not statement.strip():
            raise ValueError("lean ground_truth needs a non-empty string field 'statement'")
        if not isinstance(header, str):
            raise ValueError(
                f"lean ground_truth field 'header' must be a string, got {type(header).__name__}"
            )
        return statement, header
    raise ValueError(
        f"lean ground_truth must be a dict with 'statement' (and 'header') or a string, got {ground_truth!r}"
    )


OPTIONS = frozenset(
    {"lean", "project", "lean_path", "lean_in_sandbox", "sandbox", "image", "timeout_s", "memory_mb", "cpus",
     "output_bytes", "allowed_axioms", "native", "mask_response_faults"}
)  # fmt: skip


def _toolchain(options: Mapping[str, Any]) -> Toolchain:
    """The toolchain these options (or else the environment) name; ``ToolchainError`` when there is none."""
    return resolve(
        options.get("lean"), options.get("project"), options.get("lean_path"), options.get("lean_in_sandbox")
    )


def _check_options(options: Mapping[str, Any]) -> None:
    """A misspelt option would otherwise be ignored silently (e.g. `timeout=` instead of `timeout_s=`)."""
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise ValueError(f"unknown lean grader option(s) {unknown}; known: {sorted(OPTIONS)}")
    allowed = options.get("allowed_axioms", DEFAULT_AXIOMS)
    if isinstance(allowed, str) or not all(isinstance(a, str) for a in allowed):
        raise ValueError(f"lean option 'allowed_axioms' must be a list of axiom names, got {allowed!r}")
    if options.get("native", "reject") not in ("reject", "allow"):
        raise ValueError(f"lean option 'native' must be 'reject' or 'allow', got {options['native']!r}")


# A check is two Lean runs at once (the compile, and the trusted audit's warm start beside it): with one CPU
# they take turns and the audit's start-up lands on the check's latency (Docker, bench/lean_grader.py on a quiet
# machine: +125.6 ms over a bare `lean` at cpus=1, +75.7 ms at cpus=2). A share, not a reservation: the pool's
# workers still never use more cores than the machine has.
DEFAULT_CPUS = 2.0


class LeanGrader:
    """Options (all per call): ``lean``/``project``/``lean_path``/``lean_in_sandbox`` choose the toolchain (see
    ``toolchain``); ``sandbox`` is a backend name (``auto``, ``docker``, ``local``) or a ready ``Sandbox``, and
    ``image`` a Docker image for it (e.g. the optional Lean+Mathlib image); ``timeout_s``,
    ``memory_mb``, ``cpus`` (default 2: see ``DEFAULT_CPUS``) bound one check; ``allowed_axioms`` overrides the allow-list; ``native``
    (``reject`` | ``allow``) is the `native_decide` policy: ``allow`` also trusts the compiler's axioms;
    ``mask_response_faults`` (default False) turns the response's time-outs and crashes back into ``error``.
    A ``lean_in_sandbox`` wrapper must keep the LEAN_PATH entries it is given (the audit run adds one).
    ``timeout_s`` bounds each of the two Lean runs (compile, audit). Details ``confined`` / ``audit_warm`` say
    whether the compile run could start no process and whether the audit needed no Lean start of its own
    (both True when the toolchain's libleanshared.so is known, see ``toolchain.Toolchain.library``)."""

    name = "lean"
    version = "2.0.0"  # 2: trusted audit run, response faults incorrect, helper lemmas, binder grouping

    def __init__(self) -> None:
        self._sandboxes: dict[str, Sandbox] = {}
        self._sound: set[tuple[Any, ...]] = set()  # prologues that compiled alone (see _prologue_compiles)
        self._lock = threading.Lock()

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise ValueError for bad options (``rrl grade`` asks once, before grading any row)."""
        _check_options(options)

    # Where a check runs, not how it judges: a run's selftest grades the golden cases with the run's values.
    setup_options = frozenset({"lean", "project", "lean_path", "lean_in_sandbox", "sandbox", "image"})

    def unavailable(self, setup: Mapping[str, Any]) -> str | None:
        """Why no check can run here with these setup options (no toolchain found), or None. Users bring their
        own Lean, so a machine without one skips the golden cases instead of failing them."""
        try:
            _toolchain(setup)
        except ToolchainError as exc:
            return str(exc)
        return None

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        _check_options(options)
        statement_text, header = _ground_truth(ground_truth)
        statement = _statement(statement_text)
        native: guard.NativePolicy = options.get("native", "reject")
        code = extract_code(response)
        try:
            proof = extract_proof(code, statement)
        except ProofError as exc:
            return Grade.incorrect(exc.reason, detail=exc.detail)
        violation = guard.check(proof.prefix, native=native, allow_commands=True) or guard.check(
            proof.text, native=native
        )
        if violation is not None:
            return Grade.incorrect(f"forbidden: {violation.reason}", token=violation.token)
        toolchain = _toolchain(options)
        file = build_file(header, statement, proof)
        sandbox = self._sandbox(options.get("sandbox", "auto"), options.get("image"))
        result = sandbox.run(self._request(file, toolchain, options))
        return self._judge(
            result, file, options, native, lambda: self._prologue_compiles(sandbox, file, toolchain, options)
        )

    def _prologue_compiles(self, sandbox: Sandbox, file: LeanFile, toolchain: Toolchain,
                           options: Mapping[str, Any]) -> bool:  # fmt: skip
        """Whether the file's trusted part alone (``file.prologue``) compiles under the same limits. A run
        stopped before Lean showed the marker is the trusted part's fault only if this fails too: Lean
        reports messages from its worker threads, which the response's helpers can all keep busy, so the
        marker's absence alone would let a response turn its own time-out into an ``error``. Only sound
        prologues are remembered (a failure may be the machine's, and is asked again next time)."""
        alone = LeanFile(file.prologue, file.name, audit="", proof_line=0, marker=file.marker)
        request = self._request(alone, toolchain, options)
        key = (
            file.prologue,
            toolchain,
            request.limits,
            repr(options.get("sandbox", "auto")),
            options.get("image"),
        )
        if key in self._sound:
            return True
        frame = _frame(sandbox.run(request).stdout)
        if frame is None or frame["proof"].get("exit") != 0:
            return False
        try:
            messages = parse_messages(str(frame["proof"].get("stdout", "")).encode())
        except MalformedOutput:
            return False
        sound = any(m.text == file.marker for m in messages) and not any(
            m.severity == "error" for m in messages
        )
        if sound:
            with self._lock:
                if len(self._sound) >= _MAX_SOUND:
                    self._sound.clear()
                self._sound.add(key)
        return sound

    def _request(self, file: LeanFile, toolchain: Toolchain, options: Mapping[str, Any]) -> RunRequest:
        cpus = float(options.get("cpus", DEFAULT_CPUS))
        timeout_s = float(options.get("timeout_s", 60.0))
        limits = Limits(
            wall_s=2 * timeout_s + 10.0,  # the driver's own clocks stop each run first; this is the backstop
            memory_mb=int(options.get("memory_mb", 4096)),
            cpus=cpus,
            output_bytes=int(options.get("output_bytes", 4 << 20)),
        )
        # Lean starts one worker thread per core by default; match the CPU share so the pids limit holds, but
        # at least 2: with one thread Lean reports no message while a command runs, so a run stopped by the
        # clock would not show that it got past the trusted header. An explicit thread stack size: the
        # default follows RLIMIT_STACK and can reserve gigabytes of address space, which address-space
        # limits (the local backend) then refuse.
        config = {
            "lean": toolchain.lean,
            "flags": [f"--threads={max(2, int(cpus))}", "--tstack=8192"],
            "file": FILE_NAME,
            "olean": f"{FILE_STEM}.olean",
            "audit": file.audit,
            "timeout_s": timeout_s,
            "library": toolchain.library,
        }
        files: dict[str, bytes | str] = {FILE_NAME: file.text, DRIVER: _DRIVER_TEXT,
                                         "rrl_lean_driver.json": json.dumps(config)}  # fmt: skip
        # -I -S: no site import (the driver is stdlib only); it is most of python's start-up on some images.
        return RunRequest(["python3", "-I", "-S", DRIVER, "rrl_lean_driver.json"], files=files, limits=limits,
                          env=dict(toolchain.env), mounts=toolchain.mounts)  # fmt: skip

    def _judge(self, result: RunResult, file: LeanFile, options: Mapping[str, Any], native: str,
               prologue_compiles: Callable[[], bool]) -> Grade:  # fmt: skip
        mask = bool(options.get("mask_response_faults", False))
        timing: dict[str, Any] = {"lean_wall_s": round(result.wall_s, 4)}
        frame = _frame(result.stdout)
        if frame is None:
            if result.stopped_by == "exit":
                return Grade.error("malformed lean output", detail="no frame from the Lean driver",
                                   stderr=_tail(result.stderr), **timing)  # fmt: skip
            return Grade.error(result.stopped_by.replace("_", " "), detail=result.detail, **timing)
        proof = frame["proof"]
        try:
            messages = parse_messages(proof["stdout"].encode())
        except MalformedOutput as exc:
            messages = None
            malformed = str(exc)
        shown = [m.to_dict() for m in (messages or []) if m.text != file.marker][:_MAX_MESSAGES]
        stderr = str(proof["stderr"])[-2000:]
        timing["lean_wall_s"] = proof["wall_s"]
        timing["confined"] = bool(proof.get("confined"))  # True: the response's run could start no process
        reached = messages is not None and any(m.text == file.marker for m in messages)
        if proof["exit"] != 0 and (fault := _fault(proof, stderr, result.stopped_by)) is not None:
            if reached or prologue_compiles():  # the trusted part went through: the response's stopped Lean
                return Grade.response_fault(fault, mask=mask, stderr=stderr, messages=shown, **timing)
            return Grade.error(
                f"{fault} before the proof was reached", stderr=stderr, messages=shown, **timing
            )
        if messages is None:
            return Grade.error("malformed lean output", detail=malformed, **timing)
        errors = [m for m in messages if m.severity == "error"]
        if proof["exit"] != 0 and not (proof["exit"] == 1 and errors):
            return Grade.error(
                f"lean exited with code {proof['exit']}", stderr=stderr, messages=shown, **timing
            )
        if any(0 < m.line <= file.header_lines for m in errors):
            # The dataset's own header does not compile: no proof can be judged against it.
            return Grade.error("the ground truth's header does not compile", detail=errors[0].text,
                               messages=shown, **timing)  # fmt: skip
        if errors:
            # Message lines are file lines; `statement_line` says where the trusted statement + proof begin.
            return Grade.incorrect(
                "lean error", detail=errors[0].text, messages=shown, statement_line=file.proof_line, **timing
            )
        if any(m.severity == "warning" and "sorry" in m.text for m in messages):
            return Grade.incorrect("sorry", messages=shown, **timing)
        return self._audit(frame.get("audit"), file, options, native, shown, timing)

    def _audit(self, audit: Any, file: LeanFile, options: Mapping[str, Any], native: str,
               shown: list[dict[str, Any]], timing: dict[str, Any]) -> Grade:  # fmt: skip
        """The verdict of the trusted second run, which read the axioms of the compiled theorem."""
        if not isinstance(audit, dict) or audit.get("missing_olean"):
            return Grade.incorrect(
                "axiom check did not run", detail="no compiled proof", messages=shown, **timing
            )
        timing["audit_wall_s"] = audit["wall_s"]
        timing["audit_warm"] = bool(audit.get("warm"))  # False: the audit needed a Lean start of its own
        if audit["exit"] is None:
            # It imports what the compile run did, which fit the budget: what is left is the response's theorem.
            mask = bool(options.get("mask_response_faults", False))
            return Grade.response_fault("timeout in the axiom audit", mask=mask, **timing)
        try:
            report: list[Message] = parse_messages(audit["stdout"].encode())
        except MalformedOutput as exc:
            return Grade.error("malformed lean output", detail=str(exc), **timing)
        axioms = axiom_report(report, file.name)
        if axioms is None:
            printed = [m.to_dict() for m in report[:_MAX_MESSAGES]]
            return Grade.incorrect("axiom check did not run", messages=shown, audit=printed, **timing)
        allowed = set(options.get("allowed_axioms", DEFAULT_AXIOMS))
        if native == "allow":
            allowed |= set(NATIVE_AXIOMS)
        extra = [a for a in axioms if a not in allowed]
        if extra:
            return Grade.incorrect("disallowed axioms", axioms=list(axioms), disallowed=extra, **timing)
        return Grade.correct(axioms=list(axioms), **timing)

    def _sandbox(self, sandbox: str | Sandbox, image: str | None) -> Sandbox:
        """One sandbox per (backend, image) for this grader's lifetime, so Docker's warm pool is reused."""
        if not isinstance(sandbox, str):
            return sandbox
        key = f"{sandbox}:{image or ''}"
        with self._lock:
            if key not in self._sandboxes:
                self._sandboxes[key] = open_sandbox(sandbox, **({"image": image} if image else {}))
            return self._sandboxes[key]

    def close(self) -> None:
        with self._lock:
            for sandbox in self._sandboxes.values():
                sandbox.close()
            self._sandboxes.clear()


def _frame(stdout: bytes) -> dict[str, Any] | None:
    """The driver's one-line report (its last line), or None when it did not finish."""
    lines = stdout.decode("utf-8", errors="replace").rstrip("\n").rsplit("\n", 1)
    if not lines or not lines[-1].startswith(_FRAME):
        return None
    try:
        frame = json.loads(lines[-1][len(_FRAME) :])
    except ValueError:
        return None
    return frame if isinstance(frame, dict) and isinstance(frame.get("proof"), dict) else None


def _fault(proof: Mapping[str, Any], stderr: str, stopped_by: str) -> str | None:
    """What stopped the compile run, when it did not end with Lean's own verdict (exit 0 or 1)."""
    if proof["exit"] is None:
        return "timeout"
    if "Stack overflow detected" in stderr:
        return "stack overflow"
    if stopped_by == "memory":
        return "memory limit"
    if proof["exit"] not in (0, 1):
        return f"lean crashed (exit code {proof['exit']})"
    return None


def _tail(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")[-2000:]
