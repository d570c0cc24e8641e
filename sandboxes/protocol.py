"""The parent's side of the supervisor protocol (see ``_supervisor.py``), shared by every backend."""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from sandboxes.types import CELL_OUTCOMES, CellOutcome, RunRequest, RunResult

SUPERVISOR_SOURCE = (Path(__file__).parent / "_supervisor.py").read_text()
# The fork server runs in the supervisor's process; it is shipped as a string the supervisor execs on first use.
_FORKSERVER = "\n".join(
    (Path(__file__).parent / name).read_text() for name in ("_replchild.py", "_forkserver.py")
)
_SOURCE = f"_FORKSERVER_SOURCE = {_FORKSERVER!r}\n{SUPERVISOR_SOURCE}"
WORKDIR = "/work"
SCRATCH = (WORKDIR, "/tmp", "/dev/shm", "/dev/mqueue")  # emptied before and after every run
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORKDIR,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
_MAGIC = b"RRL1 "
SessionPhase = Literal["", "start", "continue"]


def supervisor_command(python: str = "python3") -> list[str]:
    return [python, "-I", "-S", "-c", _SOURCE]


@dataclass(frozen=True, slots=True)
class Payload:
    data: bytes
    nonce: str


def encode(
    request: RunRequest,
    *,
    kill_all: bool,
    rlimits: dict[str, int] | None = None,
    session: SessionPhase = "",
) -> Payload:
    """Header line + stdin bytes for the supervisor. ``session``: "" an ordinary run (clean-up before and after),
    "start" / "continue" a session's first / later run on its held sandbox (no clean-up after a normal exit)."""
    nonce = secrets.token_hex(16)
    files = {
        # surrogatepass: a text file with a lone surrogate is written as-is; the program decides what it means
        name: base64.b64encode(
            body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
        ).decode()
        for name, body in request.files.items()
    }
    header = {
        "command": list(request.command),
        "files": files,
        "env": {**BASE_ENV, **request.env},
        "wall_s": request.limits.wall_s,
        "output_bytes": request.limits.output_bytes,
        "stdin_len": len(request.stdin),
        "workdir": WORKDIR,
        "scratch": list(SCRATCH),
        "kill_all": kill_all,
        "rlimits": rlimits or {},
        "nonce": nonce,
        "session": session,
        "repl": None if request.repl is None else request.repl.header(),
    }
    return Payload(json.dumps(header).encode() + b"\n" + request.stdin, nonce)


@dataclass(frozen=True, slots=True)
class Frame:
    result: RunResult
    clean: bool  # every leftover process killed and scratch dirs wiped: the sandbox may be reused


def frame_size(raw: bytes | bytearray) -> int | None:
    """Bytes of the first complete frame in ``raw``, or None while more must be read. A header that is not
    a frame header counts as complete (``decode`` then rejects it) so readers never wait on garbage."""
    end = raw.find(b"\n")
    if end < 0:
        return None
    try:
        meta = json.loads(raw[len(_MAGIC) : end]) if raw.startswith(_MAGIC) else None
        size = end + 1 + int(meta["stdout_len"]) + int(meta["stderr_len"])  # type: ignore[index]
    except (ValueError, KeyError, TypeError):
        return end + 1
    return size if len(raw) >= size else None


def decode(raw: bytes, nonce: str, wall_s: float) -> Frame | None:
    """The supervisor's frame, or None when it never produced a well-formed one (it was killed)."""
    if not raw.startswith(_MAGIC):
        return None
    line, sep, rest = raw.partition(b"\n")
    if not sep:
        return None
    try:
        meta = json.loads(line[len(_MAGIC) :])
        n_out, n_err = int(meta["stdout_len"]), int(meta["stderr_len"])
        if meta["nonce"] != nonce or len(rest) != n_out + n_err:
            return None
        result = RunResult(
            stdout=rest[:n_out],
            stderr=rest[n_out:],
            exit_code=None if meta["exit_code"] is None else int(meta["exit_code"]),
            wall_s=wall_s,
            stopped_by=meta["stopped_by"],
            detail=str(meta.get("detail", "")),
            cell=_cell_outcome(meta.get("cell", "")),
        )
        return Frame(result, bool(meta["clean"]))
    except (ValueError, KeyError, TypeError):
        return None


def _cell_outcome(value: object) -> CellOutcome:
    for outcome in CELL_OUTCOMES:
        if value == outcome:
            return outcome
    raise ValueError(f"unknown cell outcome {value!r}")


PRELOAD_S = 120.0  # a session's set-up run: the zygote's imports on a loaded host, before any cell's clock


def split_restore(request: RunRequest) -> tuple[RunRequest, RunRequest] | None:
    """A session's first cell on a sandbox as two runs: a set-up run (the preload imports, then the earlier
    cells replayed silently, each with its own ``cell_s``) and the cell alone, so neither is charged to the
    cell's clock (a trivial cell after a long history no longer times out). None for a command."""
    repl = request.repl
    if repl is None:
        return None
    cell_s = repl.cell_s or request.limits.wall_s
    restore = replace(
        request,
        repl=replace(repl, code=""),
        limits=replace(request.limits, wall_s=PRELOAD_S + cell_s * len(repl.history)),
    )
    return restore, replace(request, repl=replace(repl, history=()))


def restore_failed(result: RunResult) -> RunResult:
    """What the model is told when its interpreter could not be set up again: a ``sandbox_error`` stays ours
    (nothing of the session ran yet, unless the replay did: then it says ``died``); the replay's own failure
    is the session's code failing (its cell never ran)."""
    if result.stopped_by == "sandbox_error" or (result.stopped_by == "exit" and result.cell == "died"):
        return result
    note = b"\nthe interpreter could not be set up again: replaying the earlier cells failed\n"
    return replace(result, stderr=result.stderr + note, exit_code=result.exit_code or None, cell="died")


def supervisor_lost(wall_s: float, stderr: bytes) -> RunResult:
    """The program killed its supervisor: a program failure (scores 0), never a sandbox error."""
    return RunResult(
        b"",
        stderr[-4096:],
        None,
        wall_s,
        "exit",
        "the program killed the sandbox supervisor (no result frame)",
    )
