"""The code grader's options, validated up front so a typo is a clear error, not a silent default."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from graders.code.compare import CasePolicy
from graders.code.extract import EXTRACT_MODES, ExtractMode


@dataclass(frozen=True, slots=True)
class CodeOptions:
    extract: ExtractMode = "last_block"
    score: str = "all"  # "all": 1 only when every test passes; "fraction": share of tests passed
    timeout_s: float = 4.0  # per test
    total_timeout_s: float = 30.0  # all tests of one submission
    memory_mb: int = 512
    output_cap: int = 1 << 20  # bytes of stdout per test
    float_tol: float | None = None
    case: CasePolicy = "sensitive"
    sandbox: Any = "auto"  # backend name or a ready ``sandboxes.Sandbox``

    @classmethod
    def parse(cls, options: dict[str, Any]) -> CodeOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown code-grader option(s) {unknown}; known: {sorted(known)}")
        opts = cls(**options)
        if opts.extract not in EXTRACT_MODES:
            raise ValueError(f"extract must be one of {EXTRACT_MODES}, got {opts.extract!r}")
        if opts.score not in ("all", "fraction"):
            raise ValueError(f"score must be 'all' or 'fraction', got {opts.score!r}")
        if opts.case not in ("sensitive", "insensitive"):
            raise ValueError(f"case must be 'sensitive' or 'insensitive', got {opts.case!r}")
        if not (
            opts.timeout_s > 0 and opts.total_timeout_s > 0 and opts.memory_mb >= 64 and opts.output_cap > 0
        ):
            raise ValueError("timeout_s, total_timeout_s, output_cap must be > 0 and memory_mb >= 64")
        return opts
