"""The one atomic-directory writer: all-or-nothing, replaces, and readable by others (umask, not 0700)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasoning_rl.atomic import atomic_dir


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_publishes_complete_dirs_readable_by_others(tmp_path: Path, umask_022: None) -> None:
    """Before: export and checkpoint dirs came from tempfile.mkdtemp, mode 0700."""
    target = tmp_path / "out" / "step_1"
    with atomic_dir(target) as tmp:
        assert not target.exists()
        (tmp / "weights").write_text("1")
    assert (target / "weights").read_text() == "1"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    with atomic_dir(target) as tmp:  # replacing: the new content, nothing of the old
        (tmp / "other").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["other"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["step_1"]  # no temporary left behind


def test_a_failed_write_leaves_the_old_dir_untouched(tmp_path: Path) -> None:
    target = tmp_path / "step_1"
    with atomic_dir(target) as tmp:
        (tmp / "weights").write_text("old")
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "weights").write_text("half")
        raise RuntimeError("crash mid-write")
    assert (target / "weights").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1"]


def test_files_a_library_wrote_owner_only_get_the_umask_mode(tmp_path: Path, umask_022: None) -> None:
    """Issue 47: `rrl export --adapter` wrote adapter_model.safetensors 0600 (safetensors writes through a
    private temp file); a model dir's files are 0644 under the usual umask."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    target = tmp_path / "adapter"
    with atomic_dir(target) as tmp:
        save_file({"w": torch.zeros(2)}, str(tmp / "adapter_model.safetensors"))
        (tmp / "run.sh").write_text("#!/bin/sh\n")
        os.chmod(tmp / "run.sh", 0o700)  # an owner-only script: readable too, still executable
    assert stat.S_IMODE((target / "adapter_model.safetensors").stat().st_mode) == 0o644
    assert stat.S_IMODE((target / "run.sh").stat().st_mode) == 0o744
