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
import time

log = logging.getLogger(__name__)
_DOCKER_SOCKET = "/var/run/docker.sock"
# A container the worker asked for just before it died is created by the daemon after the worker is gone
# (a start takes up to a second or two on a loaded host): look again after this long.
SETTLE_S = 2.0
LIST_ATTEMPTS = 5


def docker_configured() -> bool:
    """Whether a Docker daemon may be there at all (so pools that never sandbox never import docker)."""
    return bool(os.environ.get("DOCKER_HOST")) or os.path.exists(_DOCKER_SOCKET)


def remove_orphan_containers() -> int:
    """Remove this host's sandbox containers whose owning process is gone; the number removed."""
    if not docker_configured():
        return 0
    try:
        from docker.errors import NotFound

        from sandboxes.docker_backend import client, remove_stale
        from sandboxes.types import SandboxError
    except ImportError as exc:  # the docker SDK is not installed: no container can exist
        log.debug("no container clean-up: %s", exc)
        return 0
    for _ in range(LIST_ATTEMPTS):
        try:
            return remove_stale(client())
        except SandboxError as exc:  # no daemon answering: no container of ours can be running
            log.debug("no container clean-up: %s", exc)
            return 0
        except NotFound as exc:  # listing inspects each container: one went meanwhile (another remover)
            log.debug("container vanished during clean-up, listing again: %s", exc)
    return 0


class ContainerReaper:
    """Clean-up passes in one background thread, requests coalesced; ``drain`` waits for them to finish."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._dirty = False  # a worker was killed since the last pass began

    def request(self) -> None:
        if not docker_configured():
            return
        with self._lock:
            self._dirty = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="grading-container-reaper", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._dirty:
                    self._thread = None
                    return
                self._dirty = False
            try:
                remove_orphan_containers()
                time.sleep(SETTLE_S)
                remove_orphan_containers()
            except Exception as exc:  # a daemon API error: left for the next pass (or remove_stale at start)
                log.warning("sandbox container clean-up failed: %s", exc)

    def drain(self) -> None:
        """Wait until every requested pass is done (the pool is closing)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()
