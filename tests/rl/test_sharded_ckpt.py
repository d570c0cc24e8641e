"""Sharded checkpoints (torch.distributed.checkpoint): exact resume at the same world size, resharded
resume 2 -> 1 and 1 -> 2, and the next step after a resharded load equals the run that never stopped."""

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
# Across world sizes the sums of a step (grads, loss) are reduced in another order: float32 noise (~1e-7
# relative) that one AdamW step at lr 1e-3 turns into at most ~1e-6 absolute on the weights (test_fsdp.py).
# A key-projection bias has an exactly-zero true gradient, so Adam scales its noise up to lr: compare it at lr.
ATOL, ATOL_K_BIAS = 2e-6, 1e-3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker() -> Any:
    sys.path.insert(0, str(HERE))
    try:
        import ckpt_worker
    finally:
        sys.path.remove(str(HERE))
    return ckpt_worker


def torchrun(mode: str, model_dir: Path, directory: Path, out: Path) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    cmd += ["--master_port", str(_free_port()), str(HERE / "ckpt_worker.py")]
    cmd += [mode, str(model_dir), str(directory), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = torch.load(out, weights_only=False)
    assert result["world"] == 2
    return result


def assert_tensors(a: dict[str, Any], b: dict[str, Any], *, exact: bool) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, dict):
            assert_tensors(x, y, exact=exact)
        elif isinstance(x, torch.Tensor):
            if exact:
                assert torch.equal(x, y), k
            else:
                atol = ATOL_K_BIAS if str(k).endswith("k_proj.bias") else ATOL
                assert torch.allclose(x, y, atol=atol, rtol=1e-5), (k, (x - y).abs().max())
        else:
            assert x == y, k


def assert_state(saved: dict[str, Any], loaded: dict[str, Any], *, exact: bool) -> None:
    """Weights and optimizer state (moments, step counts, param groups) of policy and critic, and the LR."""
    for part in ("policy", "critic"):
        assert_tensors(saved[part]["model"], loaded[part]["model"], exact=exact)
        assert_tensors(saved[part]["optim"]["state"], loaded[part]["optim"]["state"], exact=exact)
        assert saved[part]["optim"]["param_groups"] == loaded[part]["optim"]["param_groups"]
    assert (saved["step"], saved["lr"], saved["critic_lr"]) == (
        loaded["step"],
        loaded["lr"],
        loaded["critic_lr"],
    )
    assert saved["step"] == 1 and saved["lr"] == pytest.approx(
        1e-3
    )  # warm-up step 2 of 2: the schedule moved


def assert_next_step(without: dict[str, Any], resumed: dict[str, Any], *, exact: bool) -> None:
    assert_tensors(without["next_policy"], resumed["next_policy"], exact=exact)
    assert_tensors(without["next_critic"], resumed["next_critic"], exact=exact)
    for key in ("loss", "pg_loss", "grad_norm", "value_loss"):
        a, b = without["next_metrics"][key], resumed["next_metrics"][key]
        assert a == b if exact else a == pytest.approx(b, rel=1e-5, abs=1e-6), key


@pytest.fixture(scope="module")
def two_rank(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Save at 2 ranks, then load at 2 ranks in the same torchrun."""
    root = tmp_path_factory.mktemp("dp2")
    result = torchrun("both", tiny_model_dir, root / "ckpt", root / "out.pt")
    result["dir"] = root / "ckpt"
    return result


@pytest.mark.slow
@pytest.mark.distributed
def test_two_rank_save_two_rank_load_is_exact(two_rank: dict[str, Any]) -> None:
    assert_state(two_rank["save"], two_rank["load"], exact=True)
    assert_next_step(two_rank["save"], two_rank["load"], exact=True)
    files = sorted(p.name for p in (two_rank["dir"] / "policy").iterdir())
    assert files == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # each rank wrote its own shard


@pytest.mark.slow
@pytest.mark.distributed
def test_two_rank_checkpoint_loads_at_one_rank(tiny_model_dir: Path, two_rank: dict[str, Any]) -> None:
    one = _worker().run("load", str(tiny_model_dir), two_rank["dir"])  # in-process: no FSDP, plain tensors
    assert one["world"] == 1
    assert_state(two_rank["save"], one["load"], exact=False)
    assert_next_step(two_rank["save"], one["load"], exact=False)


@pytest.mark.slow
@pytest.mark.distributed
def test_one_rank_checkpoint_loads_at_two_ranks(tiny_model_dir: Path, tmp_path: Path) -> None:
    one = _worker().run("save", str(tiny_model_dir), tmp_path / "ckpt")
    assert sorted(p.name for p in (tmp_path / "ckpt" / "policy").iterdir()) == [".metadata", "__0_0.distcp"]
    two = torchrun("load", tiny_model_dir, tmp_path / "ckpt", tmp_path / "out.pt")
    assert_state(one["save"], two["load"], exact=False)
    assert_next_step(one["save"], two["load"], exact=False)


def test_old_single_file_checkpoint_is_a_clear_error(tiny_model_dir: Path, tmp_path: Path) -> None:
    from reasoning_rl.policy import Policy

    (tmp_path / "policy.pt").write_bytes(b"old format")
    policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-3)
    with pytest.raises(FileNotFoundError, match=r"policy\.pt is a single-file policy checkpoint of an older"):
        policy.load_sharded(tmp_path / "policy")
    with pytest.raises(FileNotFoundError, match=r"no sharded policy checkpoint at .*missing"):
        policy.load_sharded(tmp_path / "missing")


def test_read_model_state_is_the_saved_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    from reasoning_rl.policy import Policy
    from reasoning_rl.policy.sharded import read_model_state

    policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-3)
    with torch.no_grad():
        next(policy.lm.parameters()).add_(1.0)  # not the base model's weights
    policy.save_sharded(tmp_path / "policy")
    state = read_model_state(tmp_path / "policy")
    assert sorted(state) == sorted(policy.module.state_dict())
    for k, v in policy.module.state_dict().items():
        assert torch.equal(state[k], v), k
