"""Inductor's CPU vector-ISA probes remembered across processes (``reasoning_rl.rollout.inductor_isa``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reasoning_rl import inductor_isa
from reasoning_rl.inductor_isa import cache_path, remembering


class Probe:
    """A stand-in ISA whose check passes or fails as told, counting the checks that really ran."""

    def __init__(self, flags: str, passes: bool = True) -> None:
        self._arch_flags = flags
        self.passes = passes
        self.ran = 0


def check(isa: Probe, code: str) -> bool:
    isa.ran += 1
    return isa.passes


def fingerprint(flags: str) -> str:
    return f"g++ 13={flags}=torch"


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def test_a_passed_check_is_remembered_and_a_failed_one_rerun() -> None:
    first, later = remembering(check, fingerprint), remembering(check, fingerprint)  # two "processes"
    avx = Probe("-mavx2")
    assert first(avx, "code") and avx.ran == 1
    assert later(avx, "code") and avx.ran == 1  # remembered: not run again
    assert later(avx, "other code") and avx.ran == 2  # another probe of the same ISA is its own check

    amx = Probe("-mamx-tile", passes=False)
    assert not first(amx, "code") and not later(amx, "code")
    assert amx.ran == 2  # a failure is never recorded
    assert len(json.loads(cache_path().read_text())) == 2


def test_another_compiler_or_flags_is_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    avx = Probe("-mavx2")
    remembering(check, fingerprint)(avx, "code")
    assert remembering(check, lambda flags: f"clang 18={flags}=torch")(avx, "code") and avx.ran == 2
    monkeypatch.setattr(inductor_isa, "cpu_identity", lambda: "model name: another CPU")
    assert remembering(check, fingerprint)(avx, "code") and avx.ran == 3


@pytest.mark.parametrize("content", ["{not json", '["a list"]', '{"k": "yes"}'])
def test_an_unreadable_cache_is_rechecked_and_rewritten(content: str) -> None:
    cache_path().parent.mkdir(parents=True)
    cache_path().write_text(content)
    avx = Probe("-mavx2")
    assert remembering(check, fingerprint)(avx, "code") and avx.ran == 1
    assert list(json.loads(cache_path().read_text()).values()) == [True]


def test_installed_once_on_this_torch() -> None:
    from torch._inductor import cpu_vec_isa

    original = cpu_vec_isa.VecISA.check_build
    try:
        assert inductor_isa.remember_isa_checks() and inductor_isa.remember_isa_checks()
        wrapped = cpu_vec_isa.VecISA.check_build
        assert getattr(wrapped, "remembers", False)
        assert wrapped is original or wrapped.__wrapped__ is original  # wrapped once (earlier tests may have)
    finally:
        cpu_vec_isa.VecISA.check_build = original


PICK = """
from torch._inductor import cpu_vec_isa
real = cpu_vec_isa.VecISA.check_build
ran = []  # the probes that really ran: passed or not
def counted(isa, code):
    ran.append(real(isa, code))
    return ran[-1]
cpu_vec_isa.VecISA.check_build = counted
from reasoning_rl.inductor_isa import remember_isa_checks
assert remember_isa_checks()
print(type(cpu_vec_isa.pick_vec_isa()).__name__, sum(ran), len(ran) - sum(ran))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inductor probes vector ISAs on Linux")
def test_a_second_process_picks_the_same_isa_probing_only_what_failed(tmp_path: Path) -> None:
    def pick() -> tuple[str, int, int]:
        env: dict[str, Any] = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
        out = subprocess.run(
            [sys.executable, "-c", PICK], env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr[-2000:]
        name, passed, failed = out.stdout.split()[-3:]
        return name, int(passed), int(failed)

    isa, passed, failed = pick()
    if passed == 0:
        pytest.skip(f"no vector-ISA probe passed on this machine ({isa}, {failed} failed)")
    assert pick() == (isa, 0, failed)  # the passed probes remembered; a failed one is run again
