"""Split placement survives SIGKILLs (issue 43): a continuous run on 1 training + 1 rollout rank over Ray
(``rollout.max_lag=1``, the rollout rank decoding during the update) has its driver SIGKILLed at each of the
five named points of ``rrl_testutil.KILLS`` in turn (mid-checkpoint, mid-generation, mid-update,
mid-hand-off and mid-hand-off of a resume's own weight load; on split placement the hand-off point is the
driver's, once the broadcast is issued), each run resuming the last with ``trainer.resume=auto``, then runs to
the end. It proves:

- each kill happened at the point it names (the driver's exit status and its fault line);
- no rank actor and no process of a killed run outlives it: the runs join a one-node Ray cluster the test owns,
  which reaps a dead driver's actors (their pids, from the driver's log), and every process started with the
  killed run's environment (the driver and whatever it started) is gone;
- no token lags the trainer by more than 1 and no prompt is lost or trained twice across the kills, the
  checkpoint's unfinished samples resubmitted (``lossless``).

Once on the hf engine, once as ``test_continuous_tools_e2e``'s tool run (the scripted TIR policy calling the
arithmetic tool): its engine is an entry point of a plugin directory on ``PYTHONPATH``, as an installed plugin's
would be, so the rollout rank's process finds it too.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rrl_testutil import bounded_lag, kill_at_every_point, lossless, sample_rows, still_alive

from tests.distributed.runs import REPO, env, one_node_cluster, train_cmd, write_config

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

# STEPS: past where the kills can reach whatever the overlap's timing: a process killed at generate:2 has run at
# most 3 steps past its checkpoint (a step whose groups the rollout rank finished during the last update takes
# no engine pass, the next one does), update:2 one, handoff:3 one, handoff:1 none; so the last kill's
# checkpoint is at most step 6 and the final resume has steps left to run
MAX_LAG, BATCH, N, STEPS = 1, 2, 4, 7
MARK = "RRL_KILLED_RUN"  # set in each killed driver's environment: finds the processes it started
TOOLS = REPO / "tests" / "tools"  # tir_engine (the scripted TIR policy) and arith_tool
SHAPE = (  # both runs: 1 training + 1 rollout rank over Ray, continuous at max_lag 1, 5 steps of 2 groups
    "resources.ranks_per_node=2",
    "resources.placement=split",
    "resources.rollout_ranks=1",
    f"rollout.max_lag={MAX_LAG}",
    f"rollout.n={N}",
    f"trainer.batch_size={BATCH}",
    f"algorithm.mini_batch_size={BATCH * N}",  # one optimizer step per step
    f"trainer.steps={STEPS}",
    "trainer.keep_checkpoints=2",
)
HF = ("rollout.engine=hf", "rollout.max_tokens=8", "data.train.size=32")
TIR = (  # test_continuous_tools_e2e's tool run: the scripted TIR policy calling the arithmetic tool
    "rollout.engine=scripted_tir",
    "rollout.max_tokens=160",
    "rollout.freshness_check=false",
    "rollout.tools=[arith_tool:ArithTool]",
    "rollout.tool_format=hermes",
    "rollout.max_turns=2",
    "data.train={generator: arithmetic, size: 32}",
    "data.chat_template=false",
    "grading.selftest=false",
)


def _plugin_dir(tmp: Path) -> Path:
    """A directory that, on ``PYTHONPATH``, makes ``rollout.engine=scripted_tir`` an installed plugin's engine
    (an entry point in group ``reasoning_rl.engines``): how a plugin reaches the Ray rank processes, which never
    run a driver's boot command."""
    info = tmp / "plugins" / "rrl_scripted_tir-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rrl-scripted-tir\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[reasoning_rl.engines]\nscripted_tir = tir_engine:_make\n")
    return info.parent


def _env(tmp: Path) -> dict[str, str]:
    """The runs' environment with the tool modules and the plugin importable (driver, cluster and ranks)."""
    base = env()
    return {**base, "PYTHONPATH": os.pathsep.join([str(_plugin_dir(tmp)), str(TOOLS), base["PYTHONPATH"]])}


@pytest.fixture
def one_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """A one-node Ray cluster started with the runs' environment (not a driver's ``RRL_FAULT``: only the
    driver dies), which reaps the actors of a driver that died."""
    yield from one_node_cluster(monkeypatch, _env(tmp_path))


def _started_by(tag: str) -> list[int]:
    """Pids of the live processes whose environment carries ``MARK=tag``."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARK) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue  # another user's process, or gone meanwhile
    return found


def _kill_at(cfg: Path, fault: str, overrides: tuple[str, ...], log: Path) -> None:
    """The driver SIGKILLs itself at ``fault`` (``RRL_FAULT``), resuming the run's last checkpoint; fails unless
    it died there and nothing of the run outlived it."""
    tag = f"{log}:{fault}"
    with log.open("w") as out:
        proc = subprocess.run(
            train_cmd(cfg, *overrides, "trainer.resume=auto"),
            cwd=REPO,
            env={**os.environ, "RRL_FAULT": fault, MARK: tag},  # the fixture's: the runs' environment
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=900,
        )
    text = log.read_text()
    phase, nth = fault.split(":")
    assert proc.returncode == -signal.SIGKILL, text[-3000:]
    assert f"RRL_FAULT: SIGKILL at {phase} #{nth}" in text, text[-3000:]  # there, not elsewhere
    ranks = [int(pid) for pid in re.findall(r"rank \d+ \(node .*, pid (\d+)\)", text)]
    assert len(ranks) == 2, text[-3000:]  # the training rank and the rollout rank
    assert still_alive(ranks) == [], f"{fault}: rank actors outlived the killed driver"
    assert still_alive(_started_by(tag)) == [], f"{fault}: processes of the killed driver outlived it"


def _killed_and_finished(cluster: Any, tmp: Path, model: Path, *overrides: str) -> Path:
    """The split run killed at each of ``KILLS`` in turn (a checkpoint survives every kill), then resumed to
    its end; fails unless it ends with no prompt lost or trained twice and no token lagging by more than 1."""
    cfg = write_config(tmp, model, "split", "grpo", ray_address=cluster.address)
    run = tmp / "split"
    shape = (*SHAPE, *overrides)
    resumed = kill_at_every_point(
        run, STEPS, lambda i, fault: _kill_at(cfg, fault, shape, tmp / f"kill{i}.log")
    )

    out = subprocess.run(  # the fixture's environment (tests.distributed.runs.train's lacks the plugin)
        train_cmd(cfg, *shape, "trainer.resume=auto"), cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "on 1 rollout rank(s) of their own" in out.stdout
    assert f"(step {resumed})" in out.stdout
    bounded_lag(run, STEPS, BATCH * N, MAX_LAG)
    rows = lossless(run, STEPS, BATCH)
    assert all(r["staleness/lag_max"] <= MAX_LAG for r in rows)
    return run


def test_split_run_killed_at_every_point_resumes_losslessly(
    one_node: Any, tmp_path: Path, tiny_model_dir: Path
) -> None:
    _killed_and_finished(one_node, tmp_path, tiny_model_dir, *HF)


def test_split_tool_run_killed_at_every_point_resumes_losslessly(
    one_node: Any, tmp_path: Path, tiny_model_dir: Path
) -> None:
    run = _killed_and_finished(one_node, tmp_path, tiny_model_dir, *TIR)
    calls = [
        r for step in range(1, STEPS + 1) for r in sample_rows(run, step) if "<tool_call>" in r["response"]
    ]
    assert calls, "no trained sample called the tool"
