"""Things outside Python a run may need: the Docker daemon and sandbox image, the Lean toolchain, disk."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path
from typing import Any

from reasoning_rl.doctor_checks.base import (
    CheckResult,
    Requirements,
    gib,
    installed_version,
    register,
    simulated_missing,
)

DOCKER_FIX = ("start the daemon (`bash scripts/services.sh`, or `sudo systemctl start docker`) and make sure "
              "this user may reach /var/run/docker.sock; or set the code grader's sandbox backend to local")
LEAN_FIX = ("install Lean 4 with elan (https://github.com/leanprover/elan) or build the prelude kernel with "
            "`bash scripts/services.d/30-lean.sh`; then put `lean` on PATH, set RRL_LEAN=/path/to/bin/lean, or set "
            "grading.options.lean.lean / .project in the config")
MIN_FREE_BYTES = 5 * 2**30


def _optional(module: str) -> Any | None:
    """Import a sibling package's module if this checkout has it (sandboxes/graders ship independently)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            return None
        raise


def _docker_status() -> tuple[bool, str]:
    """(ok, message) from the sandboxes package when it offers a check, else a plain daemon ping."""
    if simulated_missing("docker"):
        return False, "Docker daemon unreachable (simulated)"
    sandboxes = _optional("sandboxes")
    if sandboxes is not None and hasattr(sandboxes, "check"):
        ok, message = sandboxes.check("docker")
        if simulated_missing("sandbox_image") and ok:
            return False, "sandbox image missing (simulated)"
        return bool(ok), str(message)
    if installed_version("docker") is None:
        return False, "the docker Python SDK is not installed"
    import docker

    try:
        client = docker.from_env(timeout=3)
        info = client.version()
    except docker.errors.DockerException as exc:
        return False, f"Docker daemon unreachable: {exc}"
    return True, f"daemon {info.get('Version', '?')} up; sandbox image not checked (sandboxes.check not available)"


@register("docker", 70)
def check_docker(req: Requirements) -> list[CheckResult]:
    ok, message = _docker_status()
    if ok:
        return [CheckResult("Docker sandbox", "ok", message, required=req.docker)]
    return [CheckResult("Docker sandbox", "problem" if req.docker else "warn", message, DOCKER_FIX,
                        required=req.docker)]


def _lean_status(options: dict[str, Any]) -> tuple[bool, str]:
    """The Lean grader's own toolchain resolution (options, RRL_LEAN*, PATH), so doctor and grader agree."""
    if simulated_missing("lean"):
        return False, "no Lean toolchain found (simulated)"
    toolchain = _optional("graders.lean.toolchain")
    if toolchain is None:
        return False, "the Lean grader (graders.lean) is not installed"
    wanted = {k: str(options[k]) for k in ("lean", "project", "lean_path") if options.get(k)}
    try:
        found = toolchain.resolve(**wanted)
    except toolchain.ToolchainError as exc:
        built = Path(".cache/lean/bin/lean")
        hint = f"; {built} exists: export RRL_LEAN={built.resolve()}" if built.exists() else ""
        return False, str(exc).split(":", 1)[0] + hint
    return True, f"found via {found.source} (runs as {found.lean} in the sandbox)"


@register("lean", 80)
def check_lean(req: Requirements) -> list[CheckResult]:
    ok, message = _lean_status(req.lean_options)
    if ok:
        return [CheckResult("Lean toolchain", "ok", message, required=req.lean)]
    return [CheckResult("Lean toolchain", "problem" if req.lean else "warn", message, LEAN_FIX, required=req.lean)]


def _existing_parent(path: Path) -> Path:
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _checkpoint_estimate(model_dir: Path | None) -> int:
    """Weights + two fp32 optimizer moments per checkpoint, times two (the previous one stays until the new
    one is complete). Unknown model: a fixed floor."""
    if model_dir is None or not model_dir.is_dir():
        return MIN_FREE_BYTES
    weights = sum(p.stat().st_size for p in model_dir.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf"))
    return max(MIN_FREE_BYTES, weights * 3 * 2)


@register("disk", 90)
def check_disk(req: Requirements) -> list[CheckResult]:
    where = _existing_parent(req.output_dir or Path.cwd())
    free = shutil.disk_usage(where).free
    need = _checkpoint_estimate(req.model_dir)
    if free >= need:
        return [CheckResult("Free disk", "ok", f"{gib(free)} free at {where}", required=req.from_config)]
    return [CheckResult(
        "Free disk", "problem" if req.from_config else "warn",
        f"{gib(free)} free at {where}; checkpoints need about {gib(need)}",
        "free space, point the run's output dir at a larger disk, or keep fewer checkpoints",
        required=req.from_config,
    )]
