"""Gradient checkpointing (model.gradient_checkpointing): the layers really are recomputed in backward, and
the loss and gradients are those of the plain run. (CPU offload and the offloaded reference: test_comm.py.)"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from reasoning_rl.algorithms import LossConfig, compute_advantages  # noqa: E402
from reasoning_rl.policy import Policy, TokenBatch  # noqa: E402
from reasoning_rl.policy.wrap import decoder_layers  # noqa: E402


def step(model_dir: str, checkpointing: bool) -> tuple[dict[str, float], dict[str, torch.Tensor], int]:
    """One train step with SGD (the update is the gradient, scaled); returns metrics, weights, layer forwards."""
    policy = Policy.from_pretrained(
        model_dir, lr=1e-3, micro_batch_tokens=30, activation_checkpointing=checkpointing
    )
    policy.optimizer = torch.optim.SGD(policy.module.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(3)
    batch = TokenBatch([torch.randint(7, 90, (6 + i,), generator=g) for i in range(6)], [3] * 6)
    adv = compute_advantages("grpo", torch.rand(6, generator=g), torch.arange(6) // 3)
    calls = [0]
    for layer in decoder_layers(policy.lm):
        layer.register_forward_pre_hook(lambda m, a: calls.__setitem__(0, calls[0] + 1))
    metrics = policy.train_step(batch, adv, None, None, LossConfig(entropy_coef=0.01))
    weights = {n: p.detach().clone() for n, p in policy.lm.named_parameters()}
    return metrics, weights, calls[0]


def test_gradient_checkpointing_recomputes_layers_and_gives_the_same_step(tiny_model_dir) -> None:
    plain, w_plain, n_plain = step(str(tiny_model_dir), False)
    ckpt, w_ckpt, n_ckpt = step(str(tiny_model_dir), True)
    assert n_ckpt == 2 * n_plain > 0  # every layer forward ran again in backward
    for key in ("loss", "pg_loss", "entropy", "grad_norm"):
        assert ckpt[key] == pytest.approx(plain[key], rel=1e-6, abs=1e-8), key
    for n, p in w_plain.items():
        assert torch.allclose(p, w_ckpt[n], rtol=1e-6, atol=1e-8), n


@pytest.mark.slow
def test_fsdp_switches_without_fsdp_are_refused(tmp_path, tiny_model_dir) -> None:
    from tests.trainer.test_cli_runs import hf_config, run, user_error
    from tests.trainer.test_train_e2e import train_cmd

    cfg = hf_config(tmp_path, tiny_model_dir, "nofsdp")
    proc = run(train_cmd(cfg, "model.cpu_offload=true", "model.fsdp=off"))
    user_error(proc, "model.cpu_offload", "trains without FSDP2", "set model.fsdp=on")


@pytest.mark.slow
def test_cpu_offloaded_fsdp_run_writes_comm_bytes_per_step(tmp_path, tiny_model_dir) -> None:
    """`rrl train` with FSDP2 (one in-process rank), CPU offload and bf16 gradient reduction: the trace gets
    per-step all-gather / reduce-scatter / hand-off bytes, and the policy checkpoint is the sharded format."""
    from reasoning_rl.trace import read_trace
    from tests.trainer.test_cli_runs import hf_config, ok, run
    from tests.trainer.test_train_e2e import train_cmd

    cfg = hf_config(tmp_path, tiny_model_dir, "offload")
    ok(run(train_cmd(cfg, "model.fsdp=on", "model.cpu_offload=true", "model.reduce_dtype=bfloat16")))
    trace = read_trace(tmp_path / "offload" / "trace.jsonl")
    by_step: dict[int, dict[str, float]] = {}
    for c in trace.counters:
        if c["name"] == "comm_bytes":
            by_step.setdefault(c["step"], {})[c["attrs"]["kind"]] = c["value"]
    assert sorted(by_step) == [1, 2]
    for kinds in by_step.values():
        assert kinds["all_gather"] > 0 and kinds["handoff"] > 0
        # bf16 gradients: 2 bytes per trainable element per backward, all-gathers move fp32 (4 bytes)
        assert 0 < kinds["reduce_scatter"] < kinds["all_gather"]
    assert (tmp_path / "offload" / "checkpoints" / "step_2" / "policy" / ".metadata").is_file()
