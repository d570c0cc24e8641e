"""A cgroup leaf per local-backend run: the aggregate memory and pids limits that bubblewrap and rlimits
cannot give (RLIMIT_NPROC does not bind root; RLIMIT_AS is per process, so forks multiply it). Supports a
cgroup v2 tree with the memory and pids controllers, or the v1 ``memory`` and ``pids`` hierarchies."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

_ROOT = Path("/sys/fs/cgroup")
_PREFIX = "rrl-sandbox-"
_counter = itertools.count()


def _own_paths() -> dict[str, str]:
    """Controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


@dataclass(frozen=True, slots=True)
class Leaf:
    """One run's cgroup (a directory per hierarchy); ``wrap`` makes a command join it before it execs."""

    dirs: tuple[Path, ...]
    v2: bool

    def wrap(self, argv: list[str]) -> list[str]:
        procs = [str(d / "cgroup.procs") for d in self.dirs]
        script = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"'
        return ["/bin/sh", "-c", script, "sh", str(len(procs)), *procs, *argv]

    def oom_kills(self) -> int:
        name = "memory.events" if self.v2 else "memory.oom_control"
        for d in self.dirs:
            with contextlib.suppress(OSError):
                for line in (d / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        return 0

    def remove(self) -> None:
        """Kill whatever is still inside, then remove the directories."""
        for d in self.dirs:
            for _ in range(200):
                try:
                    pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.005)
            with contextlib.suppress(OSError):
                d.rmdir()


@dataclass(frozen=True, slots=True)
class Cgroups:
    """Where leaves are made: one writable base directory per hierarchy."""

    bases: tuple[Path, ...]
    v2: bool

    @classmethod
    def find(cls) -> Cgroups | None:
        """The usable cgroup bases of this process, or None when it cannot create limited leaves."""
        try:
            own = _own_paths()
        except (OSError, ValueError):
            return None
        if (_ROOT / "cgroup.controllers").exists() and "" in own:
            base = _ROOT / own[""].lstrip("/")
            if not {"memory", "pids"} <= set((base / "cgroup.controllers").read_text().split()):
                return None
            try:
                enabled = set((base / "cgroup.subtree_control").read_text().split())
                if not {"memory", "pids"} <= enabled:
                    (base / "cgroup.subtree_control").write_text("+memory +pids")
            except OSError:
                return None
            found = cls((base,), v2=True)
        else:
            bases = tuple(_ROOT / c / own[c].lstrip("/") for c in ("memory", "pids") if c in own)
            if len(bases) != 2 or not all((b / "cgroup.procs").exists() for b in bases):
                return None
            found = cls(bases, v2=False)
        return found if found._usable() else None

    def _usable(self) -> bool:
        try:
            self.leaf(64, 8).remove()
        except OSError:
            return False
        self._remove_stale()
        return True

    def _remove_stale(self) -> None:
        """Leaves of processes that died without removing them (empty ones; full ones are left alone)."""
        for base in self.bases:
            for d in base.glob(_PREFIX + "*"):
                owner = d.name[len(_PREFIX) :].split("-")[0]
                if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                    with contextlib.suppress(OSError):
                        d.rmdir()

    def leaf(self, memory_mb: int, pids: int) -> Leaf:
        """A new leaf with the limits set (raises OSError when the kernel refuses)."""
        name = f"{_PREFIX}{os.getpid()}-{next(_counter)}"
        leaf = Leaf(tuple(b / name for b in self.bases), self.v2)
        try:
            for d in leaf.dirs:
                d.mkdir()
            memory = str(memory_mb << 20)
            if self.v2:
                _write(leaf.dirs[0], {"memory.max": memory, "memory.swap.max": "0", "pids.max": str(pids)})
            else:
                _write(leaf.dirs[0], {"memory.limit_in_bytes": memory, "memory.memsw.limit_in_bytes": memory})
                _write(leaf.dirs[1], {"pids.max": str(pids)})
        except OSError:
            leaf.remove()
            raise
        return leaf


def _write(directory: Path, values: dict[str, str]) -> None:
    for name, value in values.items():
        path = directory / name
        if name in ("memory.swap.max", "memory.memsw.limit_in_bytes") and not path.exists():
            continue  # no swap accounting on this kernel: nothing to swap to, nothing to limit
        path.write_text(value)
