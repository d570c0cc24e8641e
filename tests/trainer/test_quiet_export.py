"""`rrl export` (and the demo, through `prepare`) redirected to a log: no progress bars, engine INFO lines or
FutureWarnings (issue 47: they printed all three into redirected logs)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import warnings
from pathlib import Path

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


REPO = Path(__file__).resolve().parents[2]
# What the demo's log showed (issue 47), emitted the way the libraries emit it, after `setup`: vLLM's Triton check at
# import (on a CPU box "Triton is installed, but doesn't include CPU backend. Disabling Triton.", through Python's
# last-resort handler: no engine has configured vLLM's logging yet), a NUMA warning through vLLM's logger as its
# CPU worker writes it, a FutureWarning from transformers (not vLLM) and a tqdm bar as a model load draws it.
EMIT = """
import warnings
{setup}
import vllm.triton_utils
from vllm.logger import init_logger
init_logger("vllm.v1.worker.cpu_worker").warning("Node 1 is not in available memory nodes [0].")
warnings.warn_explicit(
    "`torch_dtype` is deprecated", FutureWarning, "transformers/modeling_utils.py", 1, "transformers.modeling_utils"
)
from tqdm import tqdm
for _ in tqdm(range(3), desc="Loading weights"):
    pass
print("1/3 model: cached conversion")
"""
NOISE = ("memory nodes", "FutureWarning", "torch_dtype", "Loading weights", "it/s", "Triton")


def _redirected_log(tmp_path: Path, setup: str) -> str:
    """What ``EMIT`` writes with stdout and stderr going to one file (not a terminal), in a fresh interpreter."""
    env = {
        k: v for k, v in os.environ.items() if k not in {**cli_common.QUIET_ENV, **cli_common.REDIRECTED_ENV}
    }
    env["PYTHONPATH"] = str(REPO)
    log = tmp_path / f"log{len(list(tmp_path.iterdir()))}.txt"
    with log.open("w") as fh:
        subprocess.run(
            [sys.executable, "-c", EMIT.format(setup=setup)],
            cwd=tmp_path,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=300,
        )
    return log.read_text()


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM")
def test_the_demo_redirected_to_a_log_writes_no_bars_engine_lines_or_future_warnings(tmp_path: Path) -> None:
    """`make demo > demo.log` (issue 47): the demo's log had progress bars, vLLM's Triton / NUMA lines and
    FutureWarnings from other libraries than vLLM. The demo runs minutes on CPU, so this runs what it calls
    first (``demo.quiet``, before anything heavy is imported) and then what those libraries emit."""
    loud = _redirected_log(tmp_path, "")
    # each of them reaches an unquieted log (the Triton note where Triton lacks a CPU backend, as on this box)
    assert [noise for noise in NOISE[:5] if noise not in loud] == [], loud
    quiet = _redirected_log(tmp_path, "from reasoning_rl import demo\ndemo.quiet(demo.demo_config([]))")
    assert [noise for noise in NOISE if noise in quiet] == [], quiet
    assert quiet.splitlines() == ["1/3 model: cached conversion"]  # the demo's own lines still come


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM")
def test_the_demo_itself_redirected_to_a_log(tmp_path: Path, tiny_model_dir: Path) -> None:
    """`make demo > demo.log` run for real (one small step on the tiny model with the vLLM CPU engine, ~30 s):
    the log had torch's C++ "NUMA binding" warning and vLLM's "Loading safetensors checkpoint shards" bar (its own
    ``disable=`` beat TQDM_DISABLE), and the demo's lines wrapped at 80 columns."""
    env = {
        k: v for k, v in os.environ.items() if k not in {**cli_common.QUIET_ENV, **cli_common.REDIRECTED_ENV}
    }
    env.pop("TORCH_CPP_LOG_LEVEL", None)
    env.update(PYTHONPATH=str(REPO), VLLM_ENABLE_V1_MULTIPROCESSING="0")
    run = tmp_path / "demo"
    args = [f"model.path={tiny_model_dir}", f"run.dir={run}", "trainer.steps=1", "trainer.batch_size=2"]
    args += ["rollout.n=2", "eval.at_start=false", "trainer.checkpoint_every=0", "trainer.export=false"]
    log = tmp_path / "demo.log"
    with log.open("w") as fh:
        subprocess.run(
            [sys.executable, "-m", "reasoning_rl.demo", *args],
            cwd=tmp_path,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=600,
        )
    text = log.read_text()
    assert "wall time:" in text, text  # the demo ran to its end
    noise = ("NUMA", "Triton", "Completed |", "it/s", "\r", "FutureWarning", "\x1b[")
    assert [n for n in noise if n in text] == [], text
    assert [line for line in text.splitlines() if line.startswith("[W")] == [], text  # torch C++ warnings
    assert f"run dir {run}" in text  # one line each, not wrapped at 80 columns
