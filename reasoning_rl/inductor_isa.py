"""Remember inductor's CPU vector-ISA checks across processes (CPU runs only; the GPU never compiles for CPU).

vLLM's CPU backend torch.compiles parts of its sampler (``Sampler.gather_logprobs``, the random sampler). The
first inductor compile in a process picks a vector ISA by building a probe library for each one the CPU lists
(AVX2, AVX-512, its BF16 and VNNI parts, AMX and AMX-FP16) and loading each in a fresh Python that imports
torch, to survive an illegal instruction. That is ~10 s of every CPU process that starts a vLLM engine: a tiny
8-step ``rrl train`` took 18.7 s with the checks and 8.2 s without (2 cores, 2026-12-07), and the test suite
starts well over a hundred such processes. torch already keys the probe library on the compiler, its flags and
torch's version (``_get_isa_dry_compile_fingerprint``) and skips rebuilding it; only the load check repeats.

``remember_isa_checks`` wraps ``VecISA.check_build`` so that a check that PASSED is recorded in
``$XDG_CACHE_HOME/reasoning-rl/inductor-isa.json`` (default ``~/.cache``) under a key of torch's fingerprint,
the probe's source, the Python running it and this CPU's model and flags: the same machine, compiler and torch
then get the same ISA without the probes. A failed check is never recorded (it is re-run, as without us), and
an unreadable cache is treated as empty and rewritten. Where this torch has no ``VecISA.check_build`` nothing
is changed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

CACHE_NAME = "inductor-isa.json"


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reasoning-rl" / CACHE_NAME


@functools.cache
def cpu_identity() -> str:
    """This CPU's model name and flags (the first processor's lines of /proc/cpuinfo; empty where absent)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags", "Features"))]
    return "\n".join(dict.fromkeys(lines))  # one of each: every processor repeats them


def check_key(fingerprint: str, code: str) -> str:
    """The record's key: torch's probe fingerprint (compiler version, ISA flags, torch version), the probe's
    source, the Python that loads it and the CPU."""
    parts = (fingerprint, code, sys.executable, cpu_identity())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _read(path: Path) -> dict[str, bool]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if v is True} if isinstance(data, dict) else {}


def _record(path: Path, key: str) -> None:
    """Add ``key`` as passed (a private temp file renamed over the cache: concurrent writers can lose each
    other's entry, which costs a re-check, never a wrong answer)."""
    data = _read(path)
    data[key] = True
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs the checks, as without it


def remembering(
    check: Callable[[Any, str], bool], fingerprint: Callable[[str], str]
) -> Callable[[Any, str], bool]:
    """``check(isa, code)`` that first looks ``isa``'s probe up in the cache, and records a pass."""

    @functools.wraps(check)
    def check_build(isa: Any, code: str) -> bool:
        path = cache_path()
        key = check_key(fingerprint(isa._arch_flags), code)
        if _read(path).get(key):
            return True
        ok = check(isa, code)
        if ok:
            _record(path, key)
        return ok

    check_build.remembers = True  # type: ignore[attr-defined]
    return check_build


def remember_isa_checks() -> bool:
    """Install the cache on inductor's ``VecISA.check_build`` (idempotent). False where this torch lacks the
    hooks it wraps (nothing is changed then)."""
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        return False
    vec_isa = getattr(cpu_vec_isa, "VecISA", None)
    check = getattr(vec_isa, "check_build", None)
    fingerprint = getattr(cpu_vec_isa, "_get_isa_dry_compile_fingerprint", None)
    if vec_isa is None or check is None or fingerprint is None:
        return False
    if not getattr(check, "remembers", False):
        vec_isa.check_build = remembering(check, fingerprint)
    return True
