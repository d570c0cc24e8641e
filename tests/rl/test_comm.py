"""FSDP2 memory / communication switches on 2 gloo ranks: each gives the same step, and the policy's byte
accounting (``CommMeter``) equals what torch.distributed's all-gather / reduce-scatter calls really moved."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("comm") / "out.pt"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port)]
    cmd += [str(HERE / "comm_worker.py"), str(tiny_model_dir), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = torch.load(out, weights_only=False)
    return result


SETTINGS = ("default", "bf16_reduce", "no_reshard", "prefetch", "cpu_offload", "grad_ckpt")


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("name", SETTINGS)
def test_comm_bytes_equal_what_torch_distributed_moved(runs: dict[str, Any], name: str) -> None:
    run = runs[name]
    assert run["computed"] == run["measured"]  # per step, per kind
    assert all(step["all_gather"] > 0 and step["reduce_scatter"] > 0 for step in run["measured"])


@pytest.mark.slow
@pytest.mark.distributed
def test_each_switch_changes_the_bytes_it_should(runs: dict[str, Any]) -> None:
    default = runs["default"]["measured"][0]
    assert runs["bf16_reduce"]["measured"][0] == {**default, "reduce_scatter": default["reduce_scatter"] // 2}
    assert (
        runs["no_reshard"]["measured"][0]["all_gather"] < default["all_gather"] / 2
    )  # no backward re-gather
    assert runs["no_reshard"]["measured"][0]["reduce_scatter"] == default["reduce_scatter"]
    for same in ("prefetch", "cpu_offload", "grad_ckpt"):  # earlier / elsewhere, not more
        assert runs[same]["measured"] == runs["default"]["measured"], same


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("name", ["no_reshard", "prefetch", "cpu_offload", "grad_ckpt", "bf16_reduce"])
def test_switches_give_the_same_step(runs: dict[str, Any], name: str) -> None:
    a, b = runs["default"], runs[name]
    exact = name != "bf16_reduce"  # scheduling and placement only; bf16 rounds the gradients
    for key in ("loss", "pg_loss", "grad_norm", "tokens"):
        want = b["metrics"][key] if exact else pytest.approx(b["metrics"][key], rel=1e-2)
        assert a["metrics"][key] == want, key
    for n, p in a["params"].items():
        if exact:
            assert torch.equal(p, b["params"][n]), n
        else:  # two AdamW steps at lr 1e-3: a bf16 gradient moves a weight by at most ~2 lr either way
            assert torch.allclose(p, b["params"][n], atol=4e-3), n
    if name == "cpu_offload":
        assert b["device"] == "cpu"


@pytest.mark.slow
@pytest.mark.distributed
def test_reference_offloaded_to_cpu_scores_the_same(runs: dict[str, Any]) -> None:
    on, off = runs["ref"][True], runs["ref"][False]
    assert (on["offload"], off["offload"]) == ("CPUOffloadPolicy", "OffloadPolicy")
    assert torch.equal(on["logprobs"], off["logprobs"])
    assert on["computed"] == on["measured"] == off["measured"]
    assert all(step["reduce_scatter"] == 0 for step in on["measured"])  # frozen: no gradients
