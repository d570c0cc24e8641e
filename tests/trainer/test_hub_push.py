"""``rrl export --push-to-hub REPO`` against a local stub of the Hub's HTTP API (no network; issue 19)."""

from __future__ import annotations

import shutil
import socket
import sys
from pathlib import Path

import pytest

from reasoning_rl.trainer.hub import HubPushError, HubTarget
from tests.hub_stub import USER, HubStub
from tests.trainer.test_cli_runs import ok, run, user_error

TOKEN = "hf_stubtoken"
EXPORT = [sys.executable, "-m", "reasoning_rl.cli", "export"]


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (folder / "sub" / "tokenizer.json").write_text("{}")
    return folder


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_push_creates_the_repo_and_uploads_every_file(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    with HubStub(TOKEN) as hub:
        url = HubTarget("org/model", True, TOKEN, hub.url).push(folder, "first")
        HubTarget("org/model", True, TOKEN, hub.url).push(folder, "again")  # an existing repo is reused
        HubTarget("bare", False, TOKEN, hub.url).push(folder, "no owner")  # under the token's user
    state = hub.state
    assert url == f"{hub.url}/org/model"
    assert state.repos["org/model"]["files"] == _files(folder) and state.repos["org/model"]["private"] is True
    assert (
        state.repos[f"{USER}/bare"]["files"] == _files(folder) and not state.repos[f"{USER}/bare"]["private"]
    )
    assert state.commits == [("org/model", "first"), ("org/model", "again"), (f"{USER}/bare", "no owner")]
    assert state.unexpected == [] and state.authorizations == {f"Bearer {TOKEN}"}


def test_push_failures_are_one_line(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    with HubStub(TOKEN) as hub, pytest.raises(HubPushError) as refused:
        HubTarget("org/model", False, "hf_wrong", hub.url).push(folder, "m")
    assert str(refused.value) == (
        f"the hub at {hub.url} refused org/model: HTTP 401: Invalid credentials in Authorization header"
    )
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(HubPushError) as unreachable:
        HubTarget("org/model", False, TOKEN, endpoint).push(folder, "m")
    assert str(unreachable.value).startswith(f"cannot reach the hub at {endpoint} (org/model): ")
    assert "\n" not in str(unreachable.value)


def test_target_needs_a_token_a_valid_name_and_no_offline_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    with pytest.raises(
        HubPushError, match=r"org/m: no Hugging Face token; set HF_TOKEN or run `hf auth login`"
    ):
        HubTarget.resolve("org/m")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    target = HubTarget.resolve("org/m", private=True)
    assert (target.repo_id, target.private, target.token) == ("org/m", True, TOKEN)
    for bad in ("a/b/c", "org/bad name", "-x/", ""):
        with pytest.raises(HubPushError, match="is not a valid repo id"):
            HubTarget.resolve(bad)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubPushError, match="HF_HUB_OFFLINE is set"):
        HubTarget.resolve("org/m")


def test_cli_refuses_before_exporting(tmp_path: Path) -> None:
    """Token and name are checked first: no export is written for a push that cannot happen."""
    run_dir = tmp_path / "not-a-run"
    no_token = {"HF_TOKEN": "", "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "0"}
    user_error(
        run([*EXPORT, str(run_dir), "--push-to-hub", "org/m"], extra_env=no_token), "no Hugging Face token"
    )
    with_token = {**no_token, "HF_TOKEN": TOKEN}
    user_error(
        run([*EXPORT, str(run_dir), "--push-to-hub", "a/b/c"], extra_env=with_token), "not a valid repo id"
    )
    user_error(
        run([*EXPORT, str(run_dir), "--private"], extra_env=with_token), "--private applies to the repo"
    )
    assert not run_dir.exists()


@pytest.mark.slow
def test_export_pushes_a_trained_checkpoint(tmp_path: Path, moved_two_step_run: Path) -> None:
    """The run: ``moved_two_step_run``'s 2 steps (its base model deleted), copied here."""
    run_dir = tmp_path / "pushed"
    shutil.copytree(moved_two_step_run, run_dir)
    hub_env = {"HF_TOKEN": TOKEN, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "0"}
    with HubStub(TOKEN) as hub:
        env = {**hub_env, "HF_ENDPOINT": hub.url}
        proc = ok(
            run(
                [*EXPORT, str(run_dir), "--step", "1", "--push-to-hub", "me/tiny", "--private"], extra_env=env
            )
        )
        wrong = user_error(
            run([*EXPORT, str(run_dir), "--push-to-hub", "me/tiny"], extra_env={**env, "HF_TOKEN": "hf_no"}),
            "refused me/tiny: HTTP 401",
        )
    exported = run_dir / "export" / "step_1"
    assert f"pushed: {hub.url}/me/tiny" in proc.stdout
    repo = hub.state.repos["me/tiny"]
    assert repo["private"] is True and repo["files"] == _files(exported)
    assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= set(repo["files"])
    assert hub.state.commits == [("me/tiny", "rrl export pushed (step_1)")] and hub.state.unexpected == []
    assert "Traceback" not in wrong and (run_dir / "export" / "step_2").is_dir()  # the export stays
    down = {**hub_env, "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}"}
    user_error(
        run([*EXPORT, str(run_dir), "--push-to-hub", "me/tiny"], extra_env=down), "cannot reach the hub at"
    )
