"""Sandbox containers left behind by killed grading workers.

A worker's warm Docker containers live in the Docker daemon, not in the worker's process tree, so the
keeper cannot kill them; the worker removes them at exit, which a SIGKILL (time-out, memory recycling, a
crash) skips. Every container carries its owner's pid (``sandboxes.docker_backend``), so after a worker is
killed the pool removes the containers whose owner is dead, in the background, and once more, waiting, when
it closes.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)
_DOCKER_SOCKET = "/var/run/docker.sock"


def docker_configured() -> bool:
    """Whether a Docker daemon may be there at all (so pools that never sandbox never import docker)."""
    return bool(os.environ.get("DOCKER_HOST")) or os.path.exists(_DOCKER_SOCKET)


def remove_orphan_containers() -> int:
    """Remove this host's sandbox containers whose owning process is gone; the number removed."""
    if not docker_configured():
        return 0
    try:
        from sandboxes.docker_backend import client, remove_stale
        from sandboxes.types import SandboxError
    except ImportError as exc:  # the docker SDK is not installed: no container can exist
        log.debug("no container clean-up: %s", exc)
        return 0
    try:
        return remove_stale(client())
    except SandboxError as exc:  # no daemon answering: no container of ours can be running
        log.debug("no container clean-up: %s", exc)
        return 0


class ContainerReaper:
    """Coalesces clean-up requests into one background pass at a time; ``drain`` runs a last one, waiting."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._again = False
        self._wanted = False

    def request(self) -> None:
        if not docker_configured():
            return
        with self._lock:
            self._wanted = True
            if self._thread is not None and self._thread.is_alive():
                self._again = True
                return
            self._thread = threading.Thread(target=self._run, name="grading-container-reaper", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            remove_orphan_containers()
            with self._lock:
                if not self._again:
                    return
                self._again = False

    def drain(self) -> None:
        """Wait for a running pass, then make one more if any worker was killed since this reaper began."""
        with self._lock:
            thread, wanted = self._thread, self._wanted
        if thread is not None:
            thread.join()
        if wanted:
            remove_orphan_containers()
