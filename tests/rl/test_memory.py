"""Memory switches: gradient checkpointing (model.gradient_checkpointing, every k-th layer with
model.gradient_checkpointing_every) really recomputes layers in backward and activation offload (model.activation_offload)
saves through save_on_cpu, each with the loss and gradients of the plain run. (CPU offload of params, grads
and optimizer state, and the offloaded reference: test_comm.py; the reference is not built at kl_coef=0.)"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from reasoning_rl.algorithms import LossConfig, compute_advantages  # noqa: E402
from reasoning_rl.policy import Policy, TokenBatch  # noqa: E402
from reasoning_rl.policy.wrap import decoder_layers  # noqa: E402


def step(
    model_dir: str, checkpointing: bool, **switches: Any
) -> tuple[dict[str, float], dict[str, torch.Tensor], int]:
    """One train step with SGD (the update is the gradient, scaled); returns metrics, weights, layer forwards."""
    policy = Policy.from_pretrained(
        model_dir, lr=1e-3, micro_batch_tokens=30, activation_checkpointing=checkpointing, **switches
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


def saved_bytes(policy: Policy, batch: TokenBatch) -> int:
    """Bytes autograd keeps for backward in one training forward of ``batch`` (weights and shared storages
    counted once, weights out): the activation memory a switch changes."""
    from reasoning_rl.policy.batch import pack
    from reasoning_rl.policy.wrap import forward_micro

    weights = {p.untyped_storage().data_ptr() for p in policy.module.parameters()}
    seen: dict[int, int] = {}

    def keep(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in weights:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        forward_micro(policy.module, pack(batch, list(range(len(batch))), policy.device))
    return sum(seen.values())


def test_selective_checkpointing_gives_the_same_step_and_saves_what_the_plan_says(tiny_model_dir) -> None:
    """model.gradient_checkpointing_every=2 recomputes layer 0 of 2: the same step (rel 1e-6) as no checkpointing and as
    every layer, and it saves (layer activations - its input) per token, the plan's figure, measured."""
    from reasoning_rl.memory_plan.shapes import ModelShape

    g = torch.Generator().manual_seed(3)
    batch = TokenBatch([torch.randint(7, 90, (40,), generator=g) for _ in range(3)], [3] * 3)
    runs = {}
    for name, kw in {"none": {}, "every_2": {"checkpoint_every": 2}, "all": {}}.items():
        ckpt = name != "none"
        runs[name] = step(str(tiny_model_dir), ckpt, **kw)
        policy = Policy.from_pretrained(str(tiny_model_dir), activation_checkpointing=ckpt, **kw)
        runs[name] = (*runs[name], saved_bytes(policy, batch))
    (plain, w_plain, n_plain, s_plain), (half, w_half, n_half, s_half) = runs["none"], runs["every_2"]
    assert n_half == n_plain + n_plain // 2  # one of the two layers ran again in backward
    for key in ("loss", "pg_loss", "entropy", "grad_norm"):
        assert half[key] == pytest.approx(plain[key], rel=1e-6, abs=1e-8), key
    for n, p in w_plain.items():
        assert torch.allclose(p, w_half[n], rtol=1e-6, atol=1e-8), n
    shape = ModelShape.from_model_dir(tiny_model_dir)
    per_layer = shape.layer_saved_bytes(4, compiled=False) - 4 * shape.hidden  # fp32 on CPU, eager
    assert s_plain - s_half == per_layer * batch.num_tokens
    # the last layer too: the same again, but for the rotary cos/sin tables, which no layer saves once all are
    # checkpointed (the recompute's closure holds them: memory the count cannot see)
    assert s_half - runs["all"][3] == pytest.approx(per_layer * batch.num_tokens, rel=0.03)


def test_activation_offload_gives_the_same_step_through_save_on_cpu(tiny_model_dir, monkeypatch) -> None:
    """model.activation_offload: every micro-batch's forward runs under torch.autograd.graph.save_on_cpu and
    the step is bit-identical (on CPU the host is the device: its saving shows only on a GPU,
    bench/gpu/memory_plan_check.py)."""
    entered = []
    real = torch.autograd.graph.save_on_cpu

    def spy(*args, **kwargs):
        entered.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.autograd.graph, "save_on_cpu", spy)
    plain, w_plain, _ = step(str(tiny_model_dir), False)
    assert not entered
    off, w_off, _ = step(str(tiny_model_dir), False, activation_offload=True)
    assert entered and entered[0] == {"pin_memory": False}
    for key in ("loss", "pg_loss", "entropy", "grad_norm"):
        assert off[key] == plain[key], key
    for n, p in w_plain.items():
        assert torch.equal(p, w_off[n]), n


def test_fused_adamw_gives_the_same_step(tiny_model_dir) -> None:
    """optim.fused (the default on CUDA: no full-size optimizer-step temporaries) updates the weights as the
    foreach AdamW does over three steps: within 1e-7 absolute (1e-4 of a step of lr 1e-3), but for the key
    biases, whose gradient softmax cancels to rounding noise that Adam normalises to whole steps (3e-6)."""
    g = torch.Generator().manual_seed(5)
    batch = TokenBatch([torch.randint(7, 90, (12,), generator=g) for _ in range(4)], [3] * 4)
    adv = compute_advantages("grpo", torch.rand(4, generator=g), torch.arange(4) // 2)
    weights = []
    for fused in (False, True):
        policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-3, fused_optimizer=fused)
        assert policy.optimizer.defaults["fused"] is (True if fused else None)
        for _ in range(3):
            policy.train_step(batch, adv, None, None, LossConfig())
        weights.append({n: p.detach().clone() for n, p in policy.lm.named_parameters()})
    for n, p in weights[0].items():
        atol = 3e-6 if "k_proj.bias" in n else 1e-7
        assert torch.allclose(p, weights[1][n], rtol=0, atol=atol), n
