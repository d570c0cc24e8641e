"""The `lean` grader: guard the response, build the file from trusted parts, run `lean --json` in a sandbox,
then accept only error-free, sorry-free proofs whose axioms are all allowed."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from graders.lean import guard
from graders.lean.diagnostics import MalformedOutput, axiom_report, parse_messages
from graders.lean.source import LeanFile, ProofError, Statement, build_file, extract_code, extract_proof
from graders.lean.toolchain import Toolchain, resolve
from graders.types import Grade
from sandboxes import Limits, RunRequest, RunResult, Sandbox, open_sandbox

DEFAULT_AXIOMS: tuple[str, ...] = ("propext", "Classical.choice", "Quot.sound")
NATIVE_AXIOMS: tuple[str, ...] = ("Lean.ofReduceBool", "Lean.trustCompiler")
FILE_NAME = "Proof.lean"
_MAX_MESSAGES = 20


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
     "output_bytes", "allowed_axioms", "native"}
)  # fmt: skip


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


class LeanGrader:
    """Options (all per call): ``lean``/``project``/``lean_path``/``lean_in_sandbox`` choose the toolchain (see
    ``toolchain``); ``sandbox`` is a backend name (``auto``, ``docker``, ``local``) or a ready ``Sandbox``, and
    ``image`` a Docker image for it (e.g. the optional Lean+Mathlib image); ``timeout_s``,
    ``memory_mb``, ``cpus`` bound one check; ``allowed_axioms`` overrides the allow-list; ``native``
    (``reject`` | ``allow``) is the `native_decide` policy: ``allow`` also trusts the compiler's axioms."""

    name = "lean"
    version = "1.0.0"

    def __init__(self) -> None:
        self._sandboxes: dict[str, Sandbox] = {}
        self._lock = threading.Lock()

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise ValueError for bad options (``rrl grade`` asks once, before grading any row)."""
        _check_options(options)

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
        toolchain = resolve(
            options.get("lean"),
            options.get("project"),
            options.get("lean_path"),
            options.get("lean_in_sandbox"),
        )
        file = build_file(header, statement, proof)
        sandbox = self._sandbox(options.get("sandbox", "auto"), options.get("image"))
        result = sandbox.run(self._request(file, toolchain, options))
        return self._judge(result, file, options, native)

    def _request(self, file: LeanFile, toolchain: Toolchain, options: Mapping[str, Any]) -> RunRequest:
        cpus = float(options.get("cpus", 1.0))
        limits = Limits(
            wall_s=float(options.get("timeout_s", 60.0)),
            memory_mb=int(options.get("memory_mb", 4096)),
            cpus=cpus,
            output_bytes=int(options.get("output_bytes", 4 << 20)),
        )
        # Lean starts one worker thread per core by default; match the CPU share so the pids limit holds.
        # An explicit thread stack size: the default follows RLIMIT_STACK and can reserve gigabytes of
        # address space, which address-space limits (the local backend) then refuse.
        command = [*toolchain.command(FILE_NAME), f"--threads={max(1, int(cpus))}", "--tstack=8192"]
        return RunRequest(command, files={FILE_NAME: file.text}, limits=limits, env=dict(toolchain.env),
                          mounts=toolchain.mounts)  # fmt: skip

    def _judge(self, result: RunResult, file: LeanFile, options: Mapping[str, Any], native: str) -> Grade:
        timing: dict[str, Any] = {"lean_wall_s": round(result.wall_s, 4)}
        if result.stopped_by == "timeout":
            return Grade.error("timeout", **timing)
        if result.stopped_by != "exit":
            return Grade.error(result.stopped_by.replace("_", " "), detail=result.detail, **timing)
        try:
            messages = parse_messages(result.stdout)
        except MalformedOutput as exc:
            return Grade.error("malformed lean output", detail=str(exc), **timing)
        shown = [m.to_dict() for m in messages[:_MAX_MESSAGES]]
        errors = [m for m in messages if m.severity == "error"]
        stderr = result.stderr.decode("utf-8", errors="replace")[-2000:]
        if "Stack overflow detected" in stderr:
            # Lean aborts on deep recursion: like a timeout, the proof exhausted a resource; we cannot judge it.
            return Grade.error("stack overflow", stderr=stderr, messages=shown, **timing)
        if result.exit_code not in (0, 1) or (result.exit_code == 1 and not errors):
            return Grade.error(
                f"lean exited with code {result.exit_code}", stderr=stderr, messages=shown, **timing
            )
        if errors:
            # Message lines are file lines; `statement_line` says where the trusted statement + proof begin.
            return Grade.incorrect(
                "lean error", detail=errors[0].text, messages=shown, statement_line=file.proof_line, **timing
            )
        if any(m.severity == "warning" and "sorry" in m.text for m in messages):
            return Grade.incorrect("sorry", messages=shown, **timing)
        report = axiom_report(messages, file)
        if report.spoofed:
            return Grade.incorrect("axiom report spoofed", messages=shown, **timing)
        if report.axioms is None:
            return Grade.incorrect("axiom check did not run", messages=shown, **timing)
        allowed = set(options.get("allowed_axioms", DEFAULT_AXIOMS))
        if native == "allow":
            allowed |= set(NATIVE_AXIOMS)
        extra = [a for a in report.axioms if a not in allowed]
        if extra:
            return Grade.incorrect(
                "disallowed axioms", axioms=list(report.axioms), disallowed=extra, **timing
            )
        return Grade.correct(axioms=list(report.axioms), **timing)

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
