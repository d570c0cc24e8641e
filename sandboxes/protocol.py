"""The parent's side of the supervisor protocol (see ``_supervisor.py``), shared by every backend."""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sandboxes.types import RunRequest, RunResult

SUPERVISOR_SOURCE = (Path(__file__).parent / "_supervisor.py").read_text()
# The fork server runs in the supervisor's process; it is shipped as a string the supervisor execs on first use.
_FORKSERVER = (Path(__file__).parent / "_forkserver.py").read_text()
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
        )
        return Frame(result, bool(meta["clean"]))
    except (ValueError, KeyError, TypeError):
        return None


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
