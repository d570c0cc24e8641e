"""Build the sandbox image: a Dockerfile for machines with a registry, debootstrap -> ``docker import`` without one.

The offline path needs only a Debian package mirror (reachable as a package registry), not Docker Hub.
Images are cached by tag: bump ``IMAGE_VERSION`` when the recipe changes.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

IMAGE_VERSION = "1"
DEFAULT_IMAGE = f"reasoning-rl/sandbox-python:bookworm-{IMAGE_VERSION}"
DOCKERFILE_DIR = Path(__file__).parent / "images" / "python"
# Optional Lean 4 + Mathlib image (elan, pinned toolchain): needs internet, so only `--dockerfile`-style builds.
LEAN_DOCKERFILE_DIR = Path(__file__).parent / "images" / "lean"
LEAN_IMAGE = "reasoning-rl/sandbox-lean:v4.35.0"
DEBIAN_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# python3 (not python3-minimal): json, hashlib, statistics... are in libpython3.11-stdlib and graders need them.
PACKAGES = ("python3",)
# Trimmed from the rootfs: documentation and package caches the sandbox never reads.
_TRIM = (
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/cache/apt",
    "var/lib/apt/lists",
)
# The container's PID 1 only waits; programs run through exec, see ``sandboxes.docker_backend``.
IMAGE_CHANGES = ('CMD ["sleep", "infinity"]', "USER 65534:65534", "WORKDIR /work", "ENV LANG=C.UTF-8")


def image_exists(client: object, name: str) -> bool:
    import docker

    try:
        client.images.get(name)  # type: ignore[attr-defined]
    except docker.errors.ImageNotFound:
        return False
    return True


def build_offline(name: str = DEFAULT_IMAGE, mirror: str | None = None, force: bool = False) -> str:
    """debootstrap a minimal Debian rootfs with Python and import it as ``name``; skipped if the tag exists."""
    import docker

    client = docker.from_env()
    if not force and image_exists(client, name):
        return f"image {name} already present"
    if shutil.which("debootstrap") is None:
        raise RuntimeError(
            "debootstrap not found: install it (apt-get install -y debootstrap) or use the Dockerfile"
        )
    if os.geteuid() != 0:
        raise RuntimeError(
            "debootstrap needs root: rerun `rrl sandbox build` as root (or use the Dockerfile)"
        )
    mirror = mirror or os.environ.get("RRL_DEBIAN_MIRROR", DEFAULT_MIRROR)
    with tempfile.TemporaryDirectory(prefix="rrl-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            DEBIAN_SUITE,
            str(rootfs),
            mirror,
        ]
        log.info("running %s", " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-2000:]
            raise RuntimeError(f"debootstrap failed (exit {proc.returncode}); mirror {mirror}:\n{tail}")
        for rel in _TRIM:
            shutil.rmtree(rootfs / rel, ignore_errors=True)
        (rootfs / "work").mkdir(exist_ok=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        repo, _, tag = name.rpartition(":")
        client.api.import_image_from_stream(tar.stdout, repository=repo, tag=tag, changes=list(IMAGE_CHANGES))
        if tar.wait() != 0:
            raise RuntimeError("tar of the rootfs failed")
    if not image_exists(client, name):
        raise RuntimeError(f"docker import did not produce {name}")
    return f"built {name} from debootstrap ({DEBIAN_SUITE}, {mirror})"


def build_dockerfile(name: str = DEFAULT_IMAGE, directory: Path = DOCKERFILE_DIR) -> str:
    """Build from ``directory/Dockerfile`` (needs a registry for the base image, and the Lean one the internet)."""
    import docker

    client = docker.from_env()
    client.images.build(path=str(directory), tag=name, rm=True)
    return f"built {name} from {directory / 'Dockerfile'}"
