"""Write a directory atomically: fill a temporary sibling, fsync it, then one ``rename`` publishes it.

The one implementation behind checkpoints (``checkpoint.py``), exports (``trainer/export.py``,
``Policy.save_pretrained``) and the GGUF conversion cache (``policy/model.py``). A crash at any point leaves
the previous target untouched (plus a ``.tmp-*`` sibling that the next writer may remove), never a half
directory. Directories are created with mode 0o777 minus the umask (0755 under the usual umask 022), not
``tempfile.mkdtemp``'s 0700, and files a library wrote owner-only (safetensors writes through a private temp
file: 0600) get 0o666 minus the umask like any other, so a vLLM server or a teammate running as another user can
read the result.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TMP_PREFIX = ".tmp-"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (so the rename publishes durable content)."""
    for dirpath, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def _umask_modes(root: Path) -> None:
    """Owner-only files under ``root`` get the mode the umask gives a new file (read from ``root``'s own mode,
    made 0o777 minus the umask: ``os.umask`` cannot be read without setting it, for every thread at once)."""
    wanted = root.stat().st_mode & 0o666
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            mode = os.stat(path).st_mode & 0o777
            if mode & 0o066 == 0 and mode | wanted != mode:
                os.chmod(path, mode | wanted)


def _replace(tmp: Path, target: Path) -> None:
    """Move ``tmp`` to ``target``; an existing target is moved aside first and removed after the swap."""
    if target.exists():
        old = target.with_name(f"{TMP_PREFIX}old-{target.name}-{os.getpid()}-{secrets.token_hex(3)}")
        target.rename(old)
        tmp.rename(target)
        shutil.rmtree(old)
    else:
        tmp.rename(target)


@contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yield an empty temporary sibling of ``target`` to write into; on normal exit it is fsynced and renamed
    to ``target`` (replacing an existing one), on an exception it is removed and ``target`` is untouched."""
    final = Path(target)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{TMP_PREFIX}{final.name}-{os.getpid()}-{secrets.token_hex(3)}")
    tmp.mkdir(mode=0o777)  # the umask applies, as for any directory the user creates
    try:
        yield tmp
        _umask_modes(tmp)
        fsync_tree(tmp)
        _replace(tmp, final)
        fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
