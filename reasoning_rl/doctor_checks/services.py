"""Things outside Python a run may need: the Docker daemon and sandbox image, the Lean toolchain, disk."""

from __future__ import annotations

import importlib
import shutil
import threading
from pathlib import Path
from typing import Any

import sandboxes
from reasoning_rl.doctor_checks.base import (
    CheckResult,
    Requirements,
    gib,
    installed_version,
    register,
    simulated_missing,
)

DOCKER_FIX = (
    "start the daemon and build the image (`bash scripts/services.sh`, or `sudo systemctl start docker` "
    "then `rrl sandbox build`); or set grading.options.<grader>.sandbox: local (weaker isolation)"
)
LOCAL_FIX = "apt-get install -y bubblewrap (the local sandbox runs programs under bwrap)"
LEAN_FIX = (
    "install Lean 4 with elan (https://github.com/leanprover/elan) or build the prelude kernel with "
    "`bash scripts/services.d/30-lean.sh`; then put `lean` on PATH, set RRL_LEAN=/path/to/bin/lean, or set "
    "grading.options.lean.lean / .project in the config"
)
MIN_FREE_BYTES = 5 * 2**30
PROBE_TIMEOUT_S = 60.0  # sandboxes.check runs one program with a 20 s wall limit; allow for container start


def _optional(module: str) -> Any | None:
    """Import a sibling package's module if this checkout has it (sandboxes/graders ship independently)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            return None
        raise


def _bounded_check(backend: str) -> tuple[bool, str]:
    """``sandboxes.check`` with a deadline: a wedged daemon must not hang the doctor (or ``rrl train``).
    The probe thread is a daemon, so a probe that never returns does not block the process from exiting."""
    box: list[tuple[bool, str] | BaseException] = []

    def probe() -> None:
        try:
            box.append(sandboxes.check(backend))
        except Exception as exc:  # handed to the caller below
            box.append(exc)

    worker = threading.Thread(target=probe, name=f"doctor-{backend}", daemon=True)
    worker.start()
    worker.join(PROBE_TIMEOUT_S)
    if not box:
        return (
            False,
            f"{backend} sandbox did not answer within {PROBE_TIMEOUT_S:g} s (daemon overloaded or wedged?)",
        )
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


def _sandbox_status(backend: str) -> tuple[bool, str]:
    """Whether ``backend`` runs a program right now (``sandboxes.check`` really starts one)."""
    if simulated_missing(backend):
        return False, f"{backend} sandbox unavailable (simulated)"
    if backend == "docker" and installed_version("docker") is None:
        return False, "the docker Python SDK is not installed (pip install 'docker>=7')"
    ok, message = _bounded_check(backend)
    if backend == "docker" and ok and simulated_missing("sandbox_image"):
        return False, "sandbox image missing (simulated)"
    return bool(ok), str(message)


@register("sandboxes", 70)
def check_sandboxes(req: Requirements) -> list[CheckResult]:
    """Docker first; the local (bubblewrap) backend is checked when a grader may fall back to it or asks for it."""
    wanted = req.sandboxes
    if req.essential_only and not wanted:
        return []
    docker_ok, docker_msg = _sandbox_status("docker")
    needs_docker = "docker" in wanted
    if docker_ok:
        results = [CheckResult("Docker sandbox", "ok", docker_msg, required=needs_docker)]
    else:
        fallback = (
            " (sandbox: auto falls back to the local backend: weaker isolation)" if "auto" in wanted else ""
        )
        results = [
            CheckResult(
                "Docker sandbox",
                "problem" if needs_docker else "warn",
                docker_msg + fallback,
                DOCKER_FIX,
                required=needs_docker,
            )
        ]
    needs_local = "local" in wanted or ("auto" in wanted and not docker_ok)
    if needs_local or not req.from_config:
        local_ok, local_msg = _sandbox_status("local")
        results.append(
            CheckResult(
                "local sandbox",
                "ok" if local_ok else ("problem" if needs_local else "warn"),
                local_msg,
                "" if local_ok else LOCAL_FIX,
                required=needs_local,
            )
        )
    return results


def _lean_status(options: dict[str, Any]) -> tuple[bool, str]:
    """The Lean grader's own toolchain resolution (options, RRL_LEAN*, PATH), so doctor and grader agree."""
    if simulated_missing("lean"):
        return False, "no Lean toolchain found (simulated)"
    toolchain = _optional("graders.lean.toolchain")
    if toolchain is None:
        return False, "the Lean grader (graders.lean) is not installed"
    from reasoning_rl.lean_default import built_launcher, with_default_launcher

    resolved = with_default_launcher(options)  # what `rrl train` / `rrl eval` pass to the grader
    wanted = {k: str(resolved[k]) for k in ("lean", "project", "lean_path") if resolved.get(k)}
    try:
        found = toolchain.resolve(**wanted)
    except toolchain.ToolchainError as exc:
        return False, str(exc).split(":", 1)[0]
    source = found.source
    if resolved.get("lean") and not options.get("lean") and built_launcher() is not None:
        source = f"this checkout's built launcher {resolved['lean']} (used by default)"
    return True, f"found via {source} (runs as {found.lean} in the sandbox)"


@register("lean", 80)
def check_lean(req: Requirements) -> list[CheckResult]:
    ok, message = _lean_status(req.lean_options)
    if ok:
        return [CheckResult("Lean toolchain", "ok", message, required=req.lean)]
    return [
        CheckResult("Lean toolchain", "problem" if req.lean else "warn", message, LEAN_FIX, required=req.lean)
    ]


def _existing_parent(path: Path) -> Path:
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def checkpoint_estimate(model_dir: Path | None, keep: int = 2) -> int:
    """Bytes a run's checkpoints and export take: weights + two fp32 optimizer moments per checkpoint, for the
    ``keep`` checkpoints kept plus the one being written before the oldest is pruned, plus the exported
    weights. Unknown model: a fixed floor."""
    if model_dir is None or not model_dir.is_dir():
        return MIN_FREE_BYTES
    weights = sum(
        p.stat().st_size for p in model_dir.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf")
    )
    return max(MIN_FREE_BYTES, weights * 3 * (keep + 1) + weights)


@register("disk", 90)
def check_disk(req: Requirements) -> list[CheckResult]:
    where = _existing_parent(req.output_dir or Path.cwd())
    free = shutil.disk_usage(where).free
    need = checkpoint_estimate(req.model_dir, req.keep_checkpoints)
    if free >= need:
        return [CheckResult("Free disk", "ok", f"{gib(free)} free at {where}", required=req.from_config)]
    return [
        CheckResult(
            "Free disk",
            "problem" if req.from_config else "warn",
            f"{gib(free)} free at {where}; {req.keep_checkpoints + 1} checkpoints (trainer.keep_checkpoints="
            f"{req.keep_checkpoints}, plus the one being written) and the export need about {gib(need)}",
            "free space, point the run's output dir at a larger disk, or keep fewer checkpoints",
            required=req.from_config,
        )
    ]
