"""The fresh-machine guard: a missing system program stops the session with one line naming it and its
installer script (issue 14: a missing bubblewrap used to show as 31 failures)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rrl_testutil import REPO


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in a child whose PATH holds no system programs at all (python itself is run by absolute path)."""
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    env = dict(os.environ, PATH=str(empty), PYTHONPATH=os.pathsep.join([str(REPO), *sys.path]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_missing_bwrap_is_one_line_naming_the_installer(tmp_path: Path) -> None:
    res = _pytest(tmp_path, "tests/sandboxes/test_pool_and_api.py", "-k", "local")
    assert res.returncode == 4, res.stdout + res.stderr
    lines = [line for line in res.stdout.splitlines() if "missing system program" in line]
    assert len(lines) == 1, res.stdout
    assert (
        "`bwrap`" in lines[0] and "bubblewrap" in lines[0] and "scripts/services.d/10-docker.sh" in lines[0]
    )
    assert " passed" not in res.stdout and " failed" not in res.stdout  # nothing ran


def test_tests_that_need_no_system_program_still_run(tmp_path: Path) -> None:
    res = _pytest(tmp_path, "tests/test_cli_grade_defects.py", "-k", "versions_use_one_scheme")
    assert res.returncode == 0 and "1 passed" in res.stdout, res.stdout + res.stderr
