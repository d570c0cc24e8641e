"""Policy on one process: micro-batched (right-padded or packed) log-probs, chunking, compile, micro-batch invariance, checkpoints, bad input."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from reasoning_rl.algorithms import LossConfig, compute_advantages  # noqa: E402
from reasoning_rl.policy import Policy, ReferencePolicy, TokenBatch, build_batch, plan_micro_batches  # noqa: E402
from reasoning_rl.policy.logprobs import token_logprobs  # noqa: E402
from reasoning_rl.rollout import Completion  # noqa: E402


def batch_of(n: int = 6, seed: int = 0) -> TokenBatch:
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(7, 90, (3 + i % 3 + 2 + (3 * i) % 7,), generator=g) for i in range(n)]
    return TokenBatch(seqs, [3 + i % 3 for i in range(n)])


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def test_micro_batched_logprobs_equal_single_sequence_forward(tiny_model_dir, hf_model):
    batch = batch_of()
    policy = Policy.from_pretrained(str(tiny_model_dir), micro_batch_tokens=25)
    lp, ent = policy.logprobs(batch, with_entropy=True)
    assert ent is not None and lp.shape == batch.shape == ent.shape
    assert len(plan_micro_batches(batch, 25)) > 1
    for i, (seq, p) in enumerate(zip(batch.sequences, batch.prompt_lens, strict=True)):
        with torch.no_grad():
            logits = hf_model(seq[None]).logits[0, p - 1 : -1].float().log_softmax(-1)
        want = logits.gather(-1, seq[p:, None]).squeeze(-1)
        n = len(want)
        assert torch.allclose(lp[i, :n], want, atol=1e-5)
        assert torch.allclose(ent[i, :n], -(logits.exp() * logits).sum(-1), atol=1e-4)
        assert torch.all(lp[i, n:] == 0)


def test_plan_counts_padding_and_takes_longest_first():
    lens = [5, 9, 3, 9, 4, 7]
    batch = TokenBatch([torch.arange(10, 10 + n) for n in lens], [2] * len(lens))
    plans = plan_micro_batches(batch, 20)
    assert sorted(i for p in plans for i in p) == list(range(len(lens)))  # every row exactly once
    assert plans[0] == [1, 3]  # the two 9s (ties in batch order); a third row would pad to 27 > 20
    for p in plans:
        assert len(p) * max(lens[i] for i in p) <= 20
        assert [lens[i] for i in p] == sorted((lens[i] for i in p), reverse=True)
    assert plan_micro_batches(batch, 20, max_seqs=1) == [[1], [3], [5], [0], [4], [2]]


@pytest.mark.slow
def test_compiled_layers_match_eager(tiny_model_dir):
    """``model.compile``: the same log-probs and the same update as eager (CPU inductor here)."""
    batch = batch_of(8, seed=3)
    adv = torch.linspace(-1, 1, 8)
    out = []
    for compiled in (False, True):
        policy = Policy.from_pretrained(
            str(tiny_model_dir), lr=1e-3, micro_batch_tokens=40, compile_layers=compiled
        )
        old, _ = policy.logprobs(batch)
        m = policy.train_step(batch, adv, old, None, LossConfig())
        new, _ = policy.logprobs(batch)
        out.append((old, new, m["grad_norm"]))
    (old_e, new_e, g_e), (old_c, new_c, g_c) = out
    assert torch.allclose(old_e, old_c, atol=1e-5) and torch.allclose(new_e, new_c, atol=1e-5)
    assert g_e == pytest.approx(g_c, rel=1e-4) and g_e > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "rows", [11, 9, 1]
)  # chunks of 4: last chunk 3 rows, 1 row (started early), 1 row in all
def test_compiled_chunks_match_eager_values_and_grads(rows):
    torch.manual_seed(1)
    head = torch.nn.Linear(8, 50, bias=False)
    h = torch.randn(rows, 8, requires_grad=True)
    targets = torch.randint(0, 50, (rows,))
    grads = []
    for compiled in (False, True):
        lp, ent = token_logprobs(head, h, targets, chunk_tokens=4, compiled=compiled)
        (lp.sum() + 0.5 * ent.sum()).backward()
        grads.append((lp.detach(), ent.detach(), h.grad.clone(), head.weight.grad.clone()))
        h.grad, head.weight.grad = None, None
    for eager, compiled in zip(*grads, strict=True):
        assert torch.allclose(eager, compiled, atol=1e-5)


def test_old_logprobs_none_is_the_detached_current_policy(tiny_model_dir):
    """One on-policy update: ``old_logprobs=None`` == passing the policy's own log-probs (ratio 1)."""
    batch, adv = batch_of(6, seed=4), torch.linspace(-1, 1, 6)
    results = []
    for given in (True, False):
        policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-3, micro_batch_tokens=30)
        old = policy.logprobs(batch)[0] if given else None
        results.append(policy.train_step(batch, adv, old, None, LossConfig()))
    for key in ("loss", "grad_norm", "ratio_mean", "clip_frac"):
        assert results[0][key] == pytest.approx(results[1][key], rel=1e-5, abs=1e-7), key
    assert results[1]["ratio_mean"] == pytest.approx(1.0) and results[1]["grad_norm"] > 0


def test_chunked_head_matches_unchunked_values_and_grads():
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    h = torch.randn(11, 8, requires_grad=True)
    targets = torch.randint(0, 50, (11,))
    lp1, e1 = token_logprobs(head, h, targets, chunk_tokens=1024)
    (lp1.sum() + e1.sum()).backward()
    g1, gw1 = h.grad.clone(), head.weight.grad.clone()
    h.grad, head.weight.grad = None, None
    lp2, e2 = token_logprobs(head, h, targets, chunk_tokens=3)
    (lp2.sum() + e2.sum()).backward()
    assert torch.allclose(lp1, lp2) and torch.allclose(e1, e2)
    assert torch.allclose(g1, h.grad, atol=1e-6) and torch.allclose(gw1, head.weight.grad, atol=1e-6)


def _step(model_dir, budget: int, agg: str, sgd: bool = False, **kw):
    policy = Policy.from_pretrained(str(model_dir), lr=1e-3, micro_batch_tokens=budget, **kw)
    if sgd:  # update linear in the gradient: Adam's first step ~ lr * sign(g) would amplify 1e-9 noise
        policy.optimizer = torch.optim.SGD(policy.module.parameters(), lr=1e-2)
    batch = batch_of(8, seed=1)
    old, _ = policy.logprobs(batch)
    adv = compute_advantages(
        "rloo", torch.rand(8, generator=torch.Generator().manual_seed(2)), torch.arange(8) // 4
    )
    m = policy.train_step(
        batch, adv, old - 0.3 * batch.response_mask, old + 0.1, LossConfig(loss_agg=agg, kl_coef=0.1)
    )
    return policy, m


@pytest.mark.slow
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("packing", ["off", "on"])
def test_train_step_invariant_to_micro_batching(tiny_model_dir, agg, packing):
    """The step does not depend on the token budget, for right-padded blocks and for packed rows."""
    whole, m1 = _step(tiny_model_dir, 10_000, agg, sgd=True, packing=packing)
    split, m2 = _step(tiny_model_dir, 16, agg, sgd=True, chunk_tokens=4, packing=packing)
    assert m1["micro_batches"] == 1 and m2["micro_batches"] >= 4
    assert m1["packed"] == m2["packed"] == float(packing == "on")
    for key in ("loss", "pg_loss", "kl", "clip_frac", "entropy", "grad_norm"):
        assert m1[key] == pytest.approx(m2[key], rel=1e-5, abs=1e-7), key
    for (n, a), (_, b) in zip(whole.lm.named_parameters(), split.lm.named_parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-7), n


@pytest.mark.slow
def test_checkpoint_roundtrip_and_export(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    policy, _ = _step(tiny_model_dir, 64, "token-mean", warmup_steps=2, total_steps=10)
    policy.save_sharded(tmp_path / "ckpt")
    fresh = Policy.from_pretrained(
        str(tiny_model_dir), lr=1e-3, micro_batch_tokens=64, warmup_steps=2, total_steps=10
    )
    fresh.load_sharded(tmp_path / "ckpt")
    assert fresh.step == 1 and fresh.optimizer.param_groups[0]["lr"] == policy.optimizer.param_groups[0]["lr"]
    batch = batch_of(4, seed=5)
    old, _ = policy.logprobs(batch)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    m_a = policy.train_step(batch, adv, old, None, LossConfig())
    m_b = fresh.train_step(batch, adv, old, None, LossConfig())
    assert m_a["loss"] == pytest.approx(m_b["loss"], abs=1e-7) and m_a["lr"] == m_b["lr"]
    for (n, a), (_, b) in zip(policy.lm.named_parameters(), fresh.lm.named_parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-7), n  # optimizer moments restored too

    out = policy.save_pretrained(tmp_path / "export")
    assert out is not None and (out / "config.json").is_file() and (out / "tokenizer_config.json").is_file()
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    for (n, a), (_, b) in zip(policy.lm.named_parameters(), reloaded.named_parameters(), strict=True):
        assert torch.equal(a.detach(), b.detach()), n


def test_lr_schedule_warmup_then_cosine(tiny_model_dir):
    policy = Policy.from_pretrained(str(tiny_model_dir), lr=1.0, warmup_steps=2, total_steps=6)
    lrs = []
    for _ in range(7):
        lrs.append(policy.optimizer.param_groups[0]["lr"])
        policy.scheduler.step()
    assert lrs[:3] == pytest.approx([0.5, 1.0, 1.0])
    assert lrs[3] == pytest.approx(0.5 * (1 + torch.cos(torch.tensor(torch.pi * 0.25)).item()))
    assert lrs[-1] == pytest.approx(0.0, abs=1e-9)


def test_reference_policy_is_frozen_and_matches_initial_policy(tiny_model_dir):
    batch = batch_of()
    ref = ReferencePolicy.from_pretrained(str(tiny_model_dir), offload=True)
    policy = Policy.from_pretrained(str(tiny_model_dir))
    assert not any(p.requires_grad for p in ref.module.parameters())
    assert torch.allclose(ref.logprobs(batch), policy.logprobs(batch)[0], atol=1e-6)


def test_build_batch_from_completions():
    comps = [
        Completion(0, 0, [5, 6], [7, 8, 9], [-0.1, -0.2, -0.3], "abc", "stop"),
        Completion(0, 1, [5, 6], [10], [-0.5], "d", "length"),
    ]
    b = build_batch(comps, pad_id=0)
    assert b.shape == (2, 3) and b.prompt_lens == [2, 2]
    assert b.response_mask.tolist() == [[True, True, True], [True, False, False]]
    assert b.rollout_logprobs is not None and b.rollout_logprobs[1].tolist() == pytest.approx([-0.5, 0, 0])
    assert b.response_ids().tolist() == [[7, 8, 9], [10, 0, 0]]
    sub = b.select([1])
    assert sub.shape == (1, 1) and sub.rollout_logprobs is not None and sub.rollout_logprobs.shape == (1, 1)


def test_bad_batches_and_configs_are_clear_errors(tiny_model_dir):
    with pytest.raises(ValueError, match="no response tokens"):
        TokenBatch([torch.tensor([1, 2])], [2])
    with pytest.raises(ValueError, match="no tokens"):
        build_batch([Completion(0, 0, [1], [], [], "", "length")])
    batch = batch_of(3)
    policy = Policy.from_pretrained(str(tiny_model_dir), micro_batch_size=4)
    old, _ = policy.logprobs(batch)
    with pytest.raises(ValueError, match="micro_batch_size=4 exceeds the batch of 3 sequences"):
        policy.train_step(batch, torch.zeros(3), old, None, LossConfig())
    assert plan_micro_batches(batch, 4) == [
        [i] for i in sorted(range(3), key=lambda i: -len(batch.sequences[i]))
    ]
    with pytest.raises(ValueError, match="micro_batch_tokens must be >= 1"):
        Policy.from_pretrained(str(tiny_model_dir), micro_batch_tokens=0)
    with pytest.raises(ValueError, match="packing must be auto, on or off"):
        Policy.from_pretrained(str(tiny_model_dir), packing="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"old_logprobs must have the batch's per-token shape"):
        policy.train_step(batch, torch.zeros(3), old[:, :2], None, LossConfig())
    with pytest.raises(ValueError, match="advantages must be"):
        policy.train_step(batch, torch.zeros(4), old, None, LossConfig())
    with pytest.raises(ValueError, match="lr must be > 0"):
        Policy.from_pretrained(str(tiny_model_dir), lr=0.0)


@pytest.mark.slow
def test_gguf_smollm2_loads_and_converts():
    pytest.importorskip("gguf")
    from reasoning_rl.policy import load_tokenizer, smollm2_gguf, smollm2_hf_dir

    gguf_dir, name = smollm2_gguf()
    tok = load_tokenizer(str(gguf_dir), gguf_file=name, require_chat_template=True)
    out = smollm2_hf_dir()  # converted once from the GGUF, cached under <repo>/.cache
    assert (out / "config.json").is_file() and not list(out.parent.glob(out.name + ".tmp-*"))
    policy = Policy.from_pretrained(str(out), micro_batch_tokens=256)
    ids = list(
        tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True)[
            "input_ids"
        ]
    )
    answer = tok.encode("4", add_special_tokens=False)
    lp, _ = policy.logprobs(TokenBatch([torch.tensor(ids + answer)], [len(ids)]))
    assert lp.shape == (1, len(answer)) and torch.isfinite(lp).all() and float(lp.max()) <= 0


def test_activation_checkpointing_gives_the_same_step(tiny_model_dir):
    plain, m1 = _step(tiny_model_dir, 64, "token-mean", sgd=True)
    ckpt, m2 = _step(tiny_model_dir, 64, "token-mean", sgd=True, activation_checkpointing=True)
    assert m1["loss"] == pytest.approx(m2["loss"], abs=1e-7) and m1["grad_norm"] == pytest.approx(
        m2["grad_norm"], rel=1e-6
    )
    for (n, a), (_, b) in zip(plain.lm.named_parameters(), ckpt.lm.named_parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-7), n


@pytest.mark.slow
def test_critic_learns_returns_with_gae(tiny_model_dir):
    from reasoning_rl.algorithms import compute_gae, value_loss
    from reasoning_rl.policy import Critic

    batch = batch_of(6, seed=3)
    mask = batch.response_mask.float()
    critic = Critic.from_pretrained(str(tiny_model_dir), lr=3e-3, micro_batch_tokens=24)
    values = critic.values(batch)
    assert values.shape == batch.shape and torch.all(values[~batch.response_mask] == 0)
    rewards = torch.zeros(batch.shape)
    for i, n in enumerate(batch.response_lens):
        rewards[i, n - 1] = float(i % 2)  # outcome reward on the last token
    _, returns = compute_gae(rewards, values, mask, gamma=1.0, lam=1.0)
    start = float(value_loss(values, values, returns, mask, clip=None))
    for _ in range(8):
        m = critic.train_step(batch, returns, critic.values(batch))
        assert math.isfinite(m["value_loss"]) and m["grad_norm"] > 0
    end = float(value_loss(critic.values(batch), values, returns, mask, clip=None))
    assert end < 0.5 * start
