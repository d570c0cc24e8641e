"""examples/launch (issue 47): the Ray-on-Slurm batch script and the KubeRay RayJob, checked as far as a machine
without Slurm or Kubernetes can: the script parses (`bash -n`), the manifest is a RayJob with an entrypoint, their
node and GPU counts agree with the run's resources.nodes / ranks_per_node, and the exact `rrl train` command line
each runs is accepted by `rrl train ... --dry-run` (model.path pointed at the tiny model, since CI has no hub
access, and run.doctor=false, since no Ray cluster is up here; nothing else is added)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
LAUNCH = REPO / "examples" / "launch"


def train_args(line: str) -> list[str]:
    """The arguments after `rrl train` in a command line (what follows `&&` before it is the shell's)."""
    words = shlex.split(line[line.index("rrl train") :])
    assert words[:2] == ["rrl", "train"]
    return words[2:]


def overrides(args: list[str]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in args[1:] if "=" in a)


def sbatch_train_line() -> str:
    lines = [x for x in (LAUNCH / "slurm.sbatch").read_text().splitlines() if x.startswith("rrl train ")]
    assert len(lines) == 1, lines
    return lines[0]


def rayjob() -> dict:
    return yaml.safe_load((LAUNCH / "rayjob.yaml").read_text())


def test_the_sbatch_script_parses_and_starts_ray_before_the_run() -> None:
    bash = shutil.which("bash")
    assert bash is not None
    proc = subprocess.run([bash, "-n", str(LAUNCH / "slurm.sbatch")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = (LAUNCH / "slurm.sbatch").read_text()
    assert (
        text.index("ray start --head") < text.index("ray start --address") < text.index(sbatch_train_line())
    )
    assert "srun" in text[text.index("ray start --address") - 200 : text.index("ray start --address")]
    header = dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)", text, re.M))
    res = overrides(train_args(sbatch_train_line()))
    assert res["resources.ray_address"] == "auto"
    assert (
        res["resources.nodes"] == header["nodes"]
        and res["resources.ranks_per_node"] == header["gpus-per-node"]
    )


def test_the_rayjob_is_a_rayjob_whose_counts_match_the_run() -> None:
    job = rayjob()
    assert job["apiVersion"].startswith("ray.io/") and job["kind"] == "RayJob"
    spec = job["spec"]
    assert "rrl train " in spec["entrypoint"]
    res = overrides(train_args(spec["entrypoint"]))
    assert res["resources.ray_address"] == "auto"
    cluster = spec["rayClusterSpec"]
    workers = cluster["workerGroupSpecs"]
    assert int(res["resources.nodes"]) == 1 + sum(int(g["replicas"]) for g in workers)
    pods = [cluster["headGroupSpec"], *workers]
    for pod in pods:
        (container,) = pod["template"]["spec"]["containers"]
        gpus = container["resources"]["limits"]["nvidia.com/gpu"]
        assert str(gpus) == pod["rayStartParams"]["num-gpus"] == res["resources.ranks_per_node"]


@pytest.mark.parametrize("source", ["slurm.sbatch", "rayjob.yaml"])
def test_the_command_line_each_runs_passes_the_dry_run(source: str, tiny_model_dir: Path) -> None:
    line = sbatch_train_line() if source == "slurm.sbatch" else rayjob()["spec"]["entrypoint"]
    args = train_args(line)
    assert (REPO / args[0]).is_file(), f"{source} names {args[0]}, which is not in the repository"
    cmd = [sys.executable, "-m", "reasoning_rl.cli", "train", *args, "--dry-run"]
    cmd += [f"model.path={tiny_model_dir}", "run.doctor=false"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    res = overrides(args)
    nodes, ranks = res["resources.nodes"], res["resources.ranks_per_node"]
    assert f"resources: {nodes} node(s) x {ranks} rank(s)" in proc.stdout
    assert "dry run ok" in proc.stdout
