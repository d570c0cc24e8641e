"""`rrl doctor`: what a config requires, and what a user without Docker / Lean / vLLM sees (simulated by env)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from reasoning_rl.cli.app import app
from reasoning_rl.doctor import ConfigError, blocking, doctor_or_exit, run_checks
from reasoning_rl.doctor_checks import requirements_from_config
from reasoning_rl.doctor_checks.base import SIMULATE_ENV
from reasoning_rl.doctor_checks.services import DOCKER_FIX, LEAN_FIX


@pytest.fixture(scope="module")
def _real_sandbox_results() -> dict[str, tuple[bool, str]]:
    """Each sandbox backend's real check, run once: a check starts a container, and the tests run ~15 doctors."""
    import sandboxes

    return {backend: sandboxes.check(backend) for backend in ("docker", "local")}


@pytest.fixture(autouse=True)
def _sandbox_checks_once(monkeypatch: pytest.MonkeyPatch, _real_sandbox_results: dict) -> None:
    import sandboxes

    monkeypatch.setattr(sandboxes, "check", lambda backend: _real_sandbox_results[backend])


def _config(tmp_path: Path, **sections: dict) -> Path:
    cfg = {
        "model": {"path": str(tmp_path / "model")},
        "data": {"train": {"generator": "fixed_digit"}},
        "run": {"dir": str(tmp_path / "runs" / "{name}"), "device": "cpu"},
    }
    for key, value in sections.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _by_name(results: list, name: str):
    return next(r for r in results if r.name == name)


def test_bare_doctor_reports_every_area_and_requires_only_basics() -> None:
    results = run_checks()
    names = {r.name for r in results}
    for expected in (
        "Python",
        "torch",
        "transformers",
        "datasets",
        "CUDA",
        "torch.distributed",
        "NCCL",
        "vLLM",
        "vLLM sleep mode",
        "Ray",
        "Docker sandbox",
        "local sandbox",
        "Lean toolchain",
        "Free disk",
    ):
        assert expected in names
    assert all(r.status in ("ok", "warn", "problem") for r in results)
    assert [r.name for r in results if r.required] == ["Python"]


def test_requirements_follow_the_config() -> None:
    req = requirements_from_config(
        {
            "run": {"device": "cuda", "dir": "runs/{name}", "name": "x"},
            "rollout": {"engine": "vllm"},
            "data": {"default_grader": "math", "grader_map": {"mbpp": "code", "minif2f": "lean"}},
            "grading": {"backend": "ray", "ray_address": "10.0.0.1:6379"},
        }
    )
    assert (req.vllm, req.cuda, req.lean, req.ray) == (True, True, True, True)
    assert req.sandboxes == {"auto"}  # code and lean default to sandbox: auto
    assert req.output_dir == Path("runs/x") and req.ray_address == "10.0.0.1:6379"
    local = requirements_from_config(
        {"data": {"grader_map": {"mbpp": "code"}}, "grading": {"options": {"code": {"sandbox": "local"}}}}
    )
    assert local.sandboxes == {"local"} and not local.vllm and not local.lean and not local.cuda
    assert requirements_from_config({"data": {"default_grader": "math"}}).sandboxes == frozenset()


DOCKER_CODE = {"options": {"code": {"sandbox": "docker"}}}


@pytest.mark.parametrize(
    ("component", "grader_map", "grading", "engine", "check", "fix"),
    [
        ("docker", {"mbpp": "code"}, DOCKER_CODE, "hf", "Docker sandbox", DOCKER_FIX),
        ("lean", {"minif2f": "lean"}, {}, "hf", "Lean toolchain", LEAN_FIX),
        ("vllm", {}, {}, "vllm", "vLLM", "bash scripts/install.sh"),
    ],
)
def test_missing_component_required_by_config_fails_with_fix(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    component: str,
    grader_map: dict,
    grading: dict,
    engine: str,
    check: str,
    fix: str,
) -> None:
    config = _config(tmp_path, data={"grader_map": grader_map}, rollout={"engine": engine}, grading=grading)
    monkeypatch.setenv(SIMULATE_ENV, component)
    result = _by_name(run_checks(config), check)
    assert (result.status, result.required) == ("problem", True)
    assert fix in result.fix

    out = CliRunner().invoke(app, ["doctor", str(config)], env={"COLUMNS": "400"})
    assert out.exit_code == 1, out.output
    assert "PROBLEM" in out.output and fix in out.output
    assert f"required check(s) failed: {check}" in out.output

    with pytest.raises(SystemExit) as exc:
        doctor_or_exit(config)
    assert exc.value.code == 1


def test_missing_component_not_needed_is_only_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SIMULATE_ENV, "docker,lean,vllm")
    config = _config(tmp_path, rollout={"engine": "hf"})
    results = run_checks(config)
    for name in ("Docker sandbox", "Lean toolchain", "vLLM"):
        r = _by_name(results, name)
        assert (r.status, r.required) == ("warn", False) and r.fix
    assert not blocking(results)
    assert doctor_or_exit(config) == [r for r in results if "sandbox" not in r.name]  # no sandboxed grader
    out = CliRunner().invoke(app, ["doctor", str(config)], env={"COLUMNS": "400"})
    assert out.exit_code == 0, out.output
    out = CliRunner().invoke(app, ["doctor", str(config), "rollout.engine=vllm"], env={"COLUMNS": "400"})
    assert out.exit_code == 1 and "required check(s) failed: vLLM" in out.output  # the override counts


def test_auto_sandbox_without_docker_needs_the_local_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path, data={"grader_map": {"mbpp": "code"}}, rollout={"engine": "hf"})
    monkeypatch.setenv(SIMULATE_ENV, "docker")
    results = run_checks(config)
    docker = _by_name(results, "Docker sandbox")
    assert (docker.status, docker.required) == (
        "warn",
        False,
    ) and "falls back to the local backend" in docker.detail
    local = _by_name(results, "local sandbox")
    assert local.required and local.status == "ok"
    monkeypatch.setenv(SIMULATE_ENV, "docker,local")
    local = _by_name(run_checks(config), "local sandbox")
    assert local.blocking and "bubblewrap" in local.fix


def test_bf16_rollout_on_cpu_without_bf16_kernels_is_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SIMULATE_ENV, "cpu_bf16,cuda")
    config = _config(tmp_path, model={"path": str(tmp_path), "dtype": "bfloat16"}, rollout={"engine": "vllm"})
    r = _by_name(run_checks(config), "vLLM dtype")
    assert r.blocking and "float32" in r.fix


def test_sleep_mode_asked_for_where_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SIMULATE_ENV, "cuda")
    r = _by_name(run_checks(_config(tmp_path, rollout={"engine": "vllm", "sleep": True})), "vLLM sleep mode")
    assert r.blocking and "rollout.sleep: false" in r.fix
    r = _by_name(run_checks(_config(tmp_path, rollout={"engine": "vllm"})), "vLLM sleep mode")
    assert not r.blocking


def test_cuda_required_but_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SIMULATE_ENV, "cuda")
    r = _by_name(run_checks(_config(tmp_path, run={"device": "cuda"})), "CUDA")
    assert r.blocking and "nvidia-smi" in r.fix


def test_unreachable_ray_address_is_a_problem(tmp_path: Path) -> None:
    config = _config(tmp_path, grading={"ray_address": "127.0.0.1:1"})
    r = _by_name(run_checks(config), "Ray")
    assert r.blocking and "unreachable" in r.detail


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {path: x}\ndata: {train: {generator: fixed_digit}}\nrollout: {engin: vllm}\n")
    with pytest.raises(ConfigError, match="rollout.engin"):
        run_checks(bad)
    out = CliRunner().invoke(app, ["doctor", str(bad)])
    assert out.exit_code == 2 and "rollout.engin" in out.output
    out = CliRunner().invoke(app, ["doctor", str(tmp_path / "nope.yaml")])
    assert out.exit_code == 2 and "does not exist" in out.output


def test_a_crashing_check_is_a_problem_line_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from reasoning_rl.doctor_checks import CHECKS

    def boom(req: object) -> list:
        raise OSError("probe exploded")

    monkeypatch.setitem(CHECKS, "boom", (5, boom))
    results = run_checks()
    r = _by_name(results, "boom")
    assert r.status == "problem" and "OSError: probe exploded" in r.detail and not r.required
    assert len(results) > 10  # the other checks still ran


def test_train_hook_takes_the_config_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rrl train` passes its validated Config; a missing required piece stops it with the fix on stderr."""
    from reasoning_rl.config import load_config

    cfg = load_config(_config(tmp_path, rollout={"engine": "vllm"}))
    monkeypatch.setenv(SIMULATE_ENV, "vllm")
    with pytest.raises(SystemExit) as exc:
        doctor_or_exit(cfg)
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "vLLM" in err and "scripts/install.sh" in err and "1 required check(s) failed" in err


def test_a_wedged_sandbox_probe_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    import sandboxes
    from reasoning_rl.doctor_checks import services

    release, answered = threading.Event(), []

    def wedged(backend: str) -> tuple[bool, str]:  # answers only once the test is done with it
        release.wait(300)
        answered.append(backend)
        return True, "late"

    monkeypatch.setattr(services, "PROBE_TIMEOUT_S", 0.2)
    monkeypatch.setattr(sandboxes, "check", wedged)
    try:
        (docker, local) = services.check_sandboxes(services.Requirements())
        assert answered == []  # the doctor did not wait for the wedged probes
    finally:
        release.set()
    assert docker.status == "warn" and "did not answer within 0.2 s" in docker.detail
    assert local.status == "warn"


def test_wandb_is_checked_when_the_config_logs_to_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `rrl doctor` did not look for wandb; `rrl train` failed 13 s in, after loading the model."""
    monkeypatch.setenv(SIMULATE_ENV, "wandb")
    row = _by_name(run_checks(_config(tmp_path, logging={"wandb": True})), "wandb")
    assert row.blocking and "logging.wandb=true needs it" in row.detail and "pip install wandb" in row.fix
    assert not any(r.name == "wandb" for r in run_checks(_config(tmp_path)))  # not asked for, not installed


def test_disk_estimate_counts_kept_checkpoints(tmp_path: Path) -> None:
    """Before: the estimate assumed two checkpoints whatever trainer.keep_checkpoints said."""
    from reasoning_rl.doctor_checks.services import check_disk, checkpoint_estimate

    model = tmp_path / "model"
    model.mkdir()
    with (model / "model.safetensors").open("wb") as fh:  # sparse: 4 GiB of apparent size, no disk used
        fh.truncate(4 * 2**30)
    assert checkpoint_estimate(model, keep=1) == 4 * 2**30 * (3 * 2 + 1)
    assert checkpoint_estimate(model, keep=5) == 4 * 2**30 * (3 * 6 + 1)
    req = requirements_from_config(
        yaml.safe_load(_config(tmp_path, trainer={"keep_checkpoints": 5000}).read_text())
    )
    assert req.keep_checkpoints == 5000 and req.model_dir == model
    (row,) = check_disk(req)
    assert row.blocking and "5001 checkpoints (trainer.keep_checkpoints=5000" in row.detail


def test_built_lean_launcher_is_the_default_toolchain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: doctor found .cache/lean/bin/lean but only told the user to export RRL_LEAN; runs failed."""
    from reasoning_rl.config import load_config
    from reasoning_rl.lean_default import default_lean_launcher, with_default_launcher

    for var in ("RRL_LEAN", "RRL_LEAN_PROJECT", "LEAN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    monkeypatch.chdir(tmp_path)
    launcher = tmp_path / ".cache" / "lean" / "bin" / "lean"
    launcher.parent.mkdir(parents=True)
    launcher.write_text("#!/bin/sh\n")
    launcher.chmod(0o755)
    assert with_default_launcher({"timeout_s": 5}) == {"timeout_s": 5, "lean": str(launcher)}
    assert with_default_launcher({"project": "/p"}) == {"project": "/p"}  # an explicit choice wins
    monkeypatch.setenv("RRL_LEAN", "/elsewhere/lean")
    assert with_default_launcher({}) == {}
    monkeypatch.delenv("RRL_LEAN")
    cfg = load_config(_config(tmp_path, data={"grader_map": {"lean": "lean"}}))
    default_lean_launcher(cfg)
    assert cfg.grading.options["lean"]["lean"] == str(launcher)
    math_only = load_config(_config(tmp_path))
    default_lean_launcher(math_only)
    assert "lean" not in math_only.grading.options  # a math run does not start requiring Lean


@pytest.mark.lean
def test_lean_example_runs_as_shipped_without_rrl_lean(monkeypatch: pytest.MonkeyPatch) -> None:
    from graders.lean.toolchain import resolve
    from reasoning_rl.config import load_config
    from reasoning_rl.lean_default import default_lean_launcher

    repo = Path(__file__).resolve().parents[1]
    if not (repo / ".cache" / "lean" / "bin" / "lean").exists():
        pytest.skip("the Lean launcher is not built (bash scripts/services.d/30-lean.sh)")
    for var in ("RRL_LEAN", "RRL_LEAN_PROJECT", "LEAN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(repo)
    cfg = load_config(repo / "examples" / "lean_prelude" / "config.yaml")
    default_lean_launcher(cfg)  # what `rrl train` / `rrl eval` apply
    assert resolve(lean=cfg.grading.options["lean"]["lean"]).lean
    row = _by_name(run_checks(cfg), "Lean toolchain")
    assert row.status == "ok" and row.required, row


def test_cluster_is_reported_only_for_several_ranks(tmp_path: Path) -> None:
    one = _by_name(run_checks(_config(tmp_path)), "cluster")
    assert one.status == "ok" and "one training rank" in one.detail and not one.required
    two = run_checks(_config(tmp_path, resources={"ranks_per_node": 2}))
    line = _by_name(two, "cluster")
    assert (line.status, line.required) == ("ok", True)
    assert "2 ranks on a local Ray instance" in line.detail and "1 node(s)" in line.detail
    assert _by_name(two, "collectives").detail == "gloo for cpu ranks"


def test_doctor_refuses_more_cuda_ranks_than_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reasoning_rl import cluster

    monkeypatch.setattr(cluster, "local_gpu_count", lambda: 2)
    config = _config(tmp_path, run={"device": "cuda"}, resources={"ranks_per_node": 4})
    line = _by_name(run_checks(config), "cluster")
    assert (line.status, line.required) == ("problem", True)
    assert "resources.ranks_per_node=4 CUDA ranks need 4 GPUs" in line.detail and "(most: 2)" in line.detail
    assert "lower resources.ranks_per_node to 2" in line.fix
    out = CliRunner().invoke(app, ["doctor", str(config)], env={"COLUMNS": "400"})
    assert out.exit_code != 0 and "ranks_per_node=4" in out.output


def test_doctor_refuses_an_unreachable_ray_address(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = _config(tmp_path, resources={"ray_address": f"127.0.0.1:{port}"})
    line = _by_name(run_checks(config), "cluster")
    assert (line.status, line.required) == ("problem", True)
    assert f"127.0.0.1:{port}" in line.detail and "ray start --head" in line.fix
