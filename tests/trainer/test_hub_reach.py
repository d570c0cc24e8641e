"""A hub model id that cannot be loaded here is one line at once (issue 47: an unreachable id took 51 s and 24
lines of retries): ``HF_HUB_OFFLINE`` with the model not cached, or an endpoint that refuses the connection."""

from __future__ import annotations

import socket

import pytest

pytest.importorskip("huggingface_hub")

from huggingface_hub import constants  # noqa: E402

from reasoning_rl.policy import hub_reach  # noqa: E402
from reasoning_rl.policy.model import ModelLoadError, check_model_path  # noqa: E402

REPO = "no-such-org-h47/no-such-model"


def test_offline_and_not_cached_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError) as err:
        check_model_path(REPO)
    msg = str(err.value)
    assert "\n" not in msg and REPO in msg and "HF_HUB_OFFLINE" in msg


def test_an_unreachable_hub_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
        with pytest.raises(ModelLoadError) as err:
            check_model_path(REPO)
    msg = str(err.value)
    assert "\n" not in msg and REPO in msg and f"127.0.0.1:{port} unreachable" in msg


def test_a_cached_model_needs_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_reach, "cached_locally", lambda repo, filename="config.json": repo == REPO)
    check_model_path(REPO)  # no error
