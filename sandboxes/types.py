"""The one small interface every sandbox backend implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

StopReason = Literal["exit", "timeout", "memory", "output_limit", "sandbox_error"]
# What became of a python cell (``ReplCell``): it ran ("ok", or "error": it raised) and its interpreter lives on,
# or its interpreter ended ("died": the cell is never replayed); "" for a command, or a cell stopped by a limit.
CellOutcome = Literal["", "ok", "error", "died"]
CELL_OUTCOMES: tuple[CellOutcome, ...] = ("", "ok", "error", "died")


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource bounds for one run. Wall time is enforced by killing the whole sandbox, not by signals."""

    wall_s: float = 10.0
    memory_mb: int = 512
    pids: int = 64
    cpus: float = 1.0
    output_bytes: int = 1 << 20  # per stream; more is cut and the run stops with ``output_limit``
    disk_mb: int = 64  # size of the writable work dir (tmpfs)


@dataclass(frozen=True, slots=True)
class Mount:
    """A host path made visible inside the sandbox (read-only by default), e.g. a Lean toolchain."""

    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True, slots=True)
class ReplCell:
    """A python cell for the sandbox's warm interpreter (``sandboxes/_forkserver.py``) instead of a command:
    ``preload`` modules are imported once per sandbox, ``history`` (the session's earlier cells) is run silently
    first when the session's interpreter is new; ``cell_s`` bounds each cell (a replayed one too; in a session,
    preload and history run in a set-up run of their own: ``protocol.split_restore``, never on the cell's
    clock); ``address_space_mb`` caps the interpreter (a memory bomb is a fast MemoryError); ``cpu_s`` is the
    interpreter's CPU budget for its whole life (a session's: RLIMIT_CPU)."""

    code: str
    history: tuple[str, ...] = ()
    preload: tuple[str, ...] = ()
    cell_s: float | None = None
    address_space_mb: int | None = None
    cpu_s: float | None = None

    def header(self) -> dict[str, object]:
        return {
            "code": self.code,
            "history": list(self.history),
            "preload": list(self.preload),
            "cell_s": self.cell_s,
            "address_space_mb": self.address_space_mb,
            "cpu_s": self.cpu_s,
        }


@dataclass(frozen=True, slots=True)
class RunRequest:
    """A program to run: files written into the work dir, then ``command`` run there with ``stdin`` (or, with
    ``repl``, a python cell in the warm interpreter). A non-empty ``session`` (a trajectory) keeps one sandbox
    for its runs, state included, until ``Sandbox.end_session`` cleans it for the next user."""

    command: list[str]
    files: dict[str, bytes | str] = field(default_factory=dict)
    stdin: bytes = b""
    limits: Limits = field(default_factory=Limits)
    env: dict[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    repl: ReplCell | None = None
    session: str = ""


@dataclass(frozen=True, slots=True)
class RunResult:
    """What happened. ``sandbox_error`` is our infrastructure failing, never the program's fault: only what the
    program cannot cause (daemon unreachable, container removed from outside, set-up failing before any of the
    session's code ran); whatever comes out of a sandbox that ran the program is the program's outcome."""

    stdout: bytes
    stderr: bytes
    exit_code: int | None
    wall_s: float
    stopped_by: StopReason
    detail: str = ""
    cell: CellOutcome = ""

    @property
    def ok(self) -> bool:
        return self.stopped_by == "exit" and self.exit_code == 0 and self.cell != "died"


class SandboxError(RuntimeError):
    """The sandbox backend itself is unusable (daemon down, image missing); the message says how to fix it."""


class Sandbox(Protocol):
    """A backend. ``run`` must never raise for program misbehaviour; it returns a ``RunResult`` instead."""

    name: str
    isolation: Literal["strong", "weak"]

    def run(self, request: RunRequest) -> RunResult: ...

    def end_session(self, session: str) -> None:
        """Clean the sandbox ``session`` held (every process, file and IPC object it left) and free it."""
        ...

    def close(self) -> None: ...
