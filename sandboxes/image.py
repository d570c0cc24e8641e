"""Build the sandbox images: a Dockerfile for machines with a registry, debootstrap -> ``docker import`` without one.

Two images: ``DEFAULT_IMAGE`` (python3 and its standard library: the code grader's, what competitive-programming
suites expect) and ``SCI_IMAGE`` (the same plus sympy, numpy and mpmath from Debian packages: what
tool-integrated reasoning cells import; the ``python`` tool's). The offline path needs only a Debian package mirror
(reachable as a package registry), not Docker Hub. The debootstrapped root fs is kept under ``rootfs_dir(tag)``:
the local (bubblewrap) backend mounts its system dirs from there, so both backends run the same files. The
scientific packages are pinned: a mirror that serves other versions fails the build (update ``SCI_PINS`` and
bump the tag). Images are cached by tag: bump ``IMAGE_VERSION`` / the tag when a recipe changes.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
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
SCI_IMAGE = f"reasoning-rl/sandbox-python-sci:{DEBIAN_SUITE}-2"
# Debian bookworm's versions; the build checks them (debootstrap cannot pin), so the image is reproducible.
# No scipy: python3-scipy depends on python3-pythran, which pulls gcc, g++ and boost (a 1.2 GB root fs).
SCI_PINS = {
    "python3-sympy": "1.11.1-1",
    "python3-numpy": "1:1.24.2-1+deb12u1",
    "python3-mpmath": "1.2.1-2",
}
# The modules the python tool's fork server imports once per warm sandbox (see sandboxes/_forkserver.py).
SCI_PRELOAD = ("numpy", "sympy", "mpmath")
ROOTFS_ENV = "RRL_SANDBOX_ROOTFS"  # where root file systems are kept (default: ~/.cache/reasoning-rl/sandbox)


@dataclass(frozen=True, slots=True)
class Recipe:
    """What an image holds: Debian packages, some with pinned versions."""

    packages: tuple[str, ...]
    pins: dict[str, str]


RECIPES = {DEFAULT_IMAGE: Recipe(PACKAGES, {}), SCI_IMAGE: Recipe((*PACKAGES, *SCI_PINS), SCI_PINS)}
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


def rootfs_dir(name: str) -> Path:
    """Where the root fs of image ``name`` is kept (the local backend's system dirs)."""
    base = Path(os.environ.get(ROOTFS_ENV) or Path.home() / ".cache" / "reasoning-rl" / "sandbox")
    return base / name.replace("/", "_").replace(":", "_") / "rootfs"


def _docker() -> object | None:
    """A Docker client, or None on a machine without a usable daemon (the root fs is still built)."""
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as exc:  # noqa: BLE001 - no daemon: only the local backend's root fs is built
        log.info("no Docker daemon (%s): building the root fs only", exc)
        return None
    return client


def build_offline(name: str = DEFAULT_IMAGE, mirror: str | None = None, force: bool = False) -> str:
    """debootstrap a minimal Debian rootfs with Python (and ``RECIPES[name]``'s packages), keep it for the local
    backend and import it into Docker as ``name``; skipped when both exist."""
    recipe = RECIPES.get(name, RECIPES[DEFAULT_IMAGE])
    client = _docker()
    rootfs = rootfs_dir(name)
    have_image = client is None or image_exists(client, name)
    if not force and have_image and rootfs.is_dir():
        return f"image {name} already present (root fs {rootfs})"
    if shutil.which("debootstrap") is None:
        raise RuntimeError(
            "debootstrap not found: install it (apt-get install -y debootstrap) or use the Dockerfile"
        )
    if os.geteuid() != 0:
        raise RuntimeError(
            "debootstrap needs root: rerun `rrl sandbox build` as root (or use the Dockerfile)"
        )
    mirror = mirror or os.environ.get("RRL_DEBIAN_MIRROR", DEFAULT_MIRROR)
    if force or not rootfs.is_dir():
        _debootstrap(rootfs, recipe, mirror)
    if client is not None and (force or not image_exists(client, name)):
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        repo, _, tag = name.rpartition(":")
        client.api.import_image_from_stream(  # type: ignore[attr-defined]
            tar.stdout, repository=repo, tag=tag, changes=list(IMAGE_CHANGES)
        )
        if tar.wait() != 0:
            raise RuntimeError("tar of the rootfs failed")
        if not image_exists(client, name):
            raise RuntimeError(f"docker import did not produce {name}")
    where = "root fs only (no Docker)" if client is None else "docker image + root fs"
    return f"built {name} from debootstrap ({DEBIAN_SUITE}, {mirror}): {where} at {rootfs}"


def _debootstrap(rootfs: Path, recipe: Recipe, mirror: str) -> None:
    """debootstrap into a sibling temp dir, check the pins, trim, then move it into place (never half-built)."""
    tmp = rootfs.with_name("rootfs.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(recipe.packages)}",
        DEBIAN_SUITE,
        str(tmp),
    ]
    log.info("running %s %s", " ".join(cmd), mirror)
    proc = subprocess.run([*cmd, mirror], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-2000:]
        raise RuntimeError(f"debootstrap failed (exit {proc.returncode}); mirror {mirror}:\n{tail}")
    versions = installed_versions(tmp, tuple(recipe.pins))
    wrong = {p: (v, versions.get(p)) for p, v in recipe.pins.items() if versions.get(p) != v}
    if wrong:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(
            "the mirror serves other versions than the pinned ones (package: pinned, got): "
            + ", ".join(f"{p}: {want}, {got}" for p, (want, got) in wrong.items())
            + "; update sandboxes/image.py SCI_PINS and bump the image tag"
        )
    for rel in _TRIM:
        shutil.rmtree(tmp / rel, ignore_errors=True)
    (tmp / "work").mkdir(exist_ok=True)
    shutil.rmtree(rootfs, ignore_errors=True)
    tmp.rename(rootfs)


def installed_versions(rootfs: Path, packages: tuple[str, ...]) -> dict[str, str]:
    """Versions of ``packages`` in the root fs's dpkg database (absent ones are left out)."""
    if not packages:
        return {}
    admin = f"--admindir={rootfs / 'var/lib/dpkg'}"
    proc = subprocess.run(
        ["dpkg-query", admin, "-W", "-f", "${Package} ${Version}\n", *packages],
        capture_output=True,
        text=True,
    )
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)


def build_dockerfile(name: str = DEFAULT_IMAGE, directory: Path = DOCKERFILE_DIR) -> str:
    """Build from ``directory/Dockerfile`` (needs a registry for the base image, and the Lean one the internet)."""
    import docker

    client = docker.from_env()
    client.images.build(path=str(directory), tag=name, rm=True)
    return f"built {name} from {directory / 'Dockerfile'}"
