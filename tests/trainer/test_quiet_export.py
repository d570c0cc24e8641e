"""`rrl export` (and the demo, through `prepare`) redirected to a log: no progress bars, engine INFO lines or
FutureWarnings (issue 47: they printed all three into redirected logs)."""

from __future__ import annotations

import os
import warnings

import pytest

from reasoning_rl.trainer import cli as train_cli


def test_a_redirected_export_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = {**train_cli.QUIET_ENV, **train_cli.REDIRECTED_ENV}
    for key in keys:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(train_cli, "redirected", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        train_cli.quiet_outside_a_terminal()
        assert {k: os.environ.get(k) for k in keys} == keys  # TQDM / HF bars off, vLLM at ERROR
        with warnings.catch_warnings(record=True) as seen:
            warnings.warn("old API", FutureWarning, stacklevel=1)
        assert seen == []


def test_a_terminal_keeps_its_bars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(train_cli, "redirected", lambda: False)
    train_cli.quiet_outside_a_terminal()
    assert "TQDM_DISABLE" not in os.environ
