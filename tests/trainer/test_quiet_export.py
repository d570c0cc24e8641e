"""`rrl export` (and the demo, through `prepare`) redirected to a log: no progress bars, engine INFO lines or
FutureWarnings (issue 47: they printed all three into redirected logs)."""

from __future__ import annotations

import os
import warnings

import pytest

from reasoning_rl.cli import common as cli_common


def test_a_redirected_export_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = {**cli_common.QUIET_ENV, **cli_common.REDIRECTED_ENV}
    for key in keys:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(cli_common, "redirected", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        cli_common.quiet_outside_a_terminal()
        assert {k: os.environ.get(k) for k in keys} == keys  # TQDM / HF bars off, vLLM at ERROR
        with warnings.catch_warnings(record=True) as seen:
            warnings.warn("old API", FutureWarning, stacklevel=1)
        assert seen == []


def test_a_terminal_keeps_its_bars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(cli_common, "redirected", lambda: False)
    cli_common.quiet_outside_a_terminal()
    assert "TQDM_DISABLE" not in os.environ
