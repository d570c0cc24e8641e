"""Find the Lean toolchain to run and what a sandbox must mount (read-only) for it to work.

Sources, first match wins: `lean_in_sandbox` (a binary inside the sandbox image), the `lean` option (a binary), `project` (a Lake project: its `lake env` gives the
toolchain and LEAN_PATH, resolved once on the trusted host), `RRL_LEAN` / `RRL_LEAN_PROJECT`, then `lean` on
PATH. `lean_path` / `LEAN_PATH` (Lean's own .olean search path) is passed through and mounted; a toolchain's
`<prefix>/lib/lean` on it also locates `<prefix>/bin/lean` when nothing else named a binary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sandboxes import Mount

HOW_TO = (
    "give the grader a Lean toolchain: option lean='/path/to/bin/lean' (or env RRL_LEAN), "
    "or project='/path/to/lake/project' for Mathlib users (or env RRL_LEAN_PROJECT), "
    "or LEAN_PATH=<toolchain>/lib/lean, or put `lean` on PATH (elan: https://github.com/leanprover/elan). "
    "For the prelude-only test kernel run `bash scripts/services.d/30-lean.sh` and use .cache/lean/bin/lean"
)
_LAKE_TIMEOUT_S = 120.0
_LIBRARIES = ("lib/lean/libleanshared.so", "lib/libleanshared.so")  # release layout, then the test launcher's
MOUNT_BASE = "/opt/rrl-lean"  # toolchain trees appear here inside the sandbox, read-only


class ToolchainError(RuntimeError):
    """No usable Lean toolchain; the message says how to provide one."""


@dataclass(frozen=True, slots=True)
class Toolchain:
    """How to invoke Lean inside a sandbox: argv prefix, extra environment, and read-only mounts."""

    lean: str
    env: tuple[tuple[str, str], ...]
    mounts: tuple[Mount, ...]
    source: str  # which option or variable chose it, for error messages and details
    # The toolchain's libleanshared.so (inside the sandbox) when known: the driver's warm trusted audit runs
    # Lean from it in a forked child (see _driver.py). None for a binary known only inside the sandbox.
    library: str | None = None

    def command(self, file_name: str) -> list[str]:
        return [self.lean, "--json", file_name]


def resolve(
    lean: str | None = None,
    project: str | None = None,
    lean_path: str | None = None,
    lean_in_sandbox: str | None = None,
) -> Toolchain:
    """The toolchain the options and environment ask for; raises ``ToolchainError`` when there is none.

    ``lean_in_sandbox`` names a binary that exists only inside the sandbox image (the optional Lean image
    bakes one in): it is used as is, with nothing mounted.
    """
    search = lean_path if lean_path is not None else os.environ.get("LEAN_PATH")
    if lean_in_sandbox:
        return Toolchain(lean_in_sandbox, (), (), "option lean_in_sandbox")
    if lean:
        return _from_binary(lean, "option lean", search)
    if project:
        return _from_project(project, "option project")
    if env_lean := os.environ.get("RRL_LEAN"):
        return _from_binary(env_lean, "RRL_LEAN", search)
    if env_project := os.environ.get("RRL_LEAN_PROJECT"):
        return _from_project(env_project, "RRL_LEAN_PROJECT")
    if from_search := _binary_beside(search):
        return _from_binary(str(from_search), "LEAN_PATH", search)
    if on_path := shutil.which("lean"):
        return _from_binary(on_path, "PATH", search, ask_prefix=True)
    raise ToolchainError(f"no Lean toolchain found: {HOW_TO}")


def _from_binary(lean: str, source: str, search: str | None, *, ask_prefix: bool = False) -> Toolchain:
    path = Path(lean).expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ToolchainError(f"{source} = {lean!r} is not an executable file; {HOW_TO}")
    binary = path.resolve()
    if ask_prefix:
        # `lean` on PATH is often elan's proxy; the real binary lives under `lean --print-prefix`.
        binary = Path(_host_output([str(path), "--print-prefix"], cwd=None, what=source)) / "bin" / "lean"
    entries = [Path(e).resolve() for e in (search or "").split(os.pathsep) if e]
    return _inside(binary, [_toolchain_root(binary), *entries], entries, source)


@cache
def _from_project(project: str, source: str) -> Toolchain:
    """`lake env` in the user's own (trusted) project, once; the sandbox then runs that toolchain's lean."""
    root = Path(project).expanduser().resolve()
    if not (root / "lakefile.lean").is_file() and not (root / "lakefile.toml").is_file():
        raise ToolchainError(f"{source} = {project!r} has no lakefile.lean or lakefile.toml; {HOW_TO}")
    lake = shutil.which("lake")
    if lake is None:
        raise ToolchainError(f"{source} = {project!r} needs `lake` on PATH (install elan); {HOW_TO}")
    prefix = Path(_host_output([lake, "env", "lean", "--print-prefix"], cwd=root, what=source))
    search = _host_output([lake, "env", "printenv", "LEAN_PATH"], cwd=root, what=source)
    entries = [Path(e).resolve() for e in search.split(os.pathsep) if e]
    return _inside(prefix / "bin" / "lean", [prefix, root, *entries], entries, source)


def _binary_beside(search: str | None) -> Path | None:
    """A toolchain's `<prefix>/lib/lean` on LEAN_PATH implies its binary at `<prefix>/bin/lean`."""
    for entry in (search or "").split(os.pathsep):
        path = Path(entry).expanduser()
        if (
            entry
            and path.parts[-2:] == ("lib", "lean")
            and (candidate := path.parent.parent / "bin" / "lean").is_file()
        ):
            return candidate
    return None


def _host_output(argv: list[str], cwd: Path | None, what: str) -> str:
    try:
        done = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=_LAKE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"{what}: running {' '.join(argv)} failed: {exc}; {HOW_TO}") from exc
    if done.returncode != 0 or not done.stdout.strip():
        raise ToolchainError(
            f"{what}: {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[:500]}; {HOW_TO}"
        )
    return done.stdout.strip().splitlines()[-1]


def _toolchain_root(binary: Path) -> Path:
    """`<root>/bin/lean` -> `<root>` (it holds lib/ with libleanshared.so and the core .olean files)."""
    return binary.parent.parent if binary.parent.name == "bin" else binary.parent


def _inside(binary: Path, roots: list[Path], search: list[Path], source: str) -> Toolchain:
    """Mount each root read-only under MOUNT_BASE and rewrite the binary and LEAN_PATH to those paths.

    Nested roots are dropped (their parent's mount covers them); relative rpaths such as
    `$ORIGIN/../lib` keep working because a whole toolchain root is mounted as one tree.
    """
    unique: list[Path] = []
    for root in sorted({r for r in roots if r.exists()}, key=lambda p: len(p.parts)):
        if not any(root.is_relative_to(kept) for kept in unique):
            unique.append(root)
    mounts = tuple(Mount(str(r), f"{MOUNT_BASE}/{i}", read_only=True) for i, r in enumerate(unique))

    def inside(path: Path) -> str:
        for root, mount in zip(unique, mounts, strict=True):
            if path.is_relative_to(root):
                return str(Path(mount.target) / path.relative_to(root))
        return str(path)

    env = (("LEAN_PATH", os.pathsep.join(inside(e) for e in search)),) if search else ()
    root = _toolchain_root(binary)
    library = next((root / rel for rel in _LIBRARIES if (root / rel).is_file()), None)
    return Toolchain(inside(binary), env, mounts, source, inside(library) if library else None)
