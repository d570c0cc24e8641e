"""The test-only fault hook: silent when unset, a clear error for a bad spec, SIGKILL exactly at the n-th pass."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from reasoning_rl import faults

SCRIPT = (
    "from reasoning_rl.faults import fault_point\n"
    "for i in range(1, 4):\n"
    "    fault_point('update'); fault_point('generate'); print(i, flush=True)\n"
)


def test_unset_or_other_phase_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(faults.ENV, raising=False)
    faults.fault_point("update")
    monkeypatch.setenv(faults.ENV, "checkpoint:1")
    faults.fault_point("update")  # another phase: not counted, not killed


@pytest.mark.parametrize("spec", ["update", "update:0", "nowhere:1", "update:x"])
def test_bad_spec_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    monkeypatch.setenv(faults.ENV, spec)
    with pytest.raises(ValueError, match=faults.ENV):
        faults.fault_point("update")


def test_kills_the_process_at_the_nth_pass() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={"RRL_FAULT": "generate:2", "PATH": ""},
        capture_output=True,
        text=True,
    )
    assert out.returncode == -signal.SIGKILL
    assert out.stdout.split() == ["1"]  # killed in the second pass, before printing 2
    assert "RRL_FAULT: SIGKILL at generate #2" in out.stderr
