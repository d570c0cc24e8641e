"""Packed micro-batches (sequences back to back in one row, position ids restarting per sequence) against the
same sequences right-padded one per row: the same log-probs, entropy, loss and gradients for the policy, the
reference and the critic (float32, 1e-5); the token-budget planner never exceeds its budget."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from reasoning_rl.algorithms import LossConfig, compute_advantages  # noqa: E402
from reasoning_rl.model_shapes import QWEN25_1_5B  # noqa: E402
from reasoning_rl.policy import Critic, Policy, ReferencePolicy, TokenBatch  # noqa: E402
from reasoning_rl.policy.batch import (  # noqa: E402
    AttentionCost,
    attention_cost,
    layout_cost,
    pack,
    plan_layout,
)

TOL = 1e-5


def mixed_batch(n: int = 7, seed: int = 4) -> TokenBatch:
    """Lengths 5..31 tokens, prompts 2..5: a packed row holds sequences of very different lengths."""
    g = torch.Generator().manual_seed(seed)
    lens = [31, 5, 12, 7, 22, 9, 16][:n]
    return TokenBatch([torch.randint(7, 90, (m,), generator=g) for m in lens], [2 + i % 4 for i in range(n)])


def _sgd(model, lr: float = 1e-2) -> None:
    """An update linear in the gradient, so equal weights after the step mean equal gradients."""
    model.optimizer = torch.optim.SGD(model.module.parameters(), lr=lr)


def _assert_same_params(a, b) -> None:
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.allclose(p, q, atol=TOL, rtol=0), (n, (p - q).abs().max())


def test_packed_row_is_one_row_with_restarting_positions():
    batch = mixed_batch(3)
    mb = pack(batch, [0, 1, 2], packed=True)
    assert tuple(mb.input_ids.shape) == (1, 31 + 5 + 12)
    assert mb.position_ids is not None
    assert mb.position_ids[0].tolist() == [*range(31), *range(5), *range(12)]
    flat = mb.input_ids.reshape(-1)
    assert torch.equal(flat[mb.gather + 1], mb.targets)  # each gathered position predicts its next token
    assert mb.lens == [31 - 2, 5 - 3, 12 - 4]


def test_packed_policy_and_reference_match_padded(tiny_model_dir):
    """log-probs, entropy, loss, metrics and gradients (via an SGD step) of one packed row equal those of
    the same sequences right-padded one per row."""
    batch = mixed_batch()
    adv = compute_advantages("rloo", torch.linspace(0, 1, 7), torch.tensor([0, 0, 0, 1, 1, 1, 1]))
    cfg = LossConfig(kl_coef=0.1, entropy_coef=0.01, clip_high=0.28)
    out = {}
    for packing in ("off", "on"):
        policy = Policy.from_pretrained(
            str(tiny_model_dir), lr=1e-3, micro_batch_tokens=10_000, packing=packing
        )
        _sgd(policy)
        ref = ReferencePolicy.from_pretrained(str(tiny_model_dir), micro_batch_tokens=10_000, packing=packing)
        lp, ent = policy.logprobs(batch, with_entropy=True)
        ref_lp = ref.logprobs(batch)
        m = policy.train_step(batch, adv, lp - 0.3 * batch.response_mask, ref_lp + 0.1, cfg)
        out[packing] = (lp, ent, ref_lp, m, policy.lm)
    (lp0, ent0, ref0, m0, lm0), (lp1, ent1, ref1, m1, lm1) = out["off"], out["on"]
    assert m0["packed"] == 0.0 and m1["packed"] == 1.0 and m1["micro_batches"] == 1.0
    assert m1["padding_share"] == 0.0 < m0["padding_share"]
    assert torch.allclose(lp0, lp1, atol=TOL) and torch.allclose(ent0, ent1, atol=TOL)
    assert torch.allclose(ref0, ref1, atol=TOL)
    for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ratio_mean", "grad_norm"):
        assert m0[key] == pytest.approx(m1[key], rel=TOL, abs=1e-7), key
    assert m0["clip_frac"] > 0
    _assert_same_params(lm0, lm1)


def test_packed_critic_matches_padded(tiny_model_dir):
    batch = mixed_batch()
    b, t = batch.shape
    returns = torch.randn(b, t, generator=torch.Generator().manual_seed(1)) * batch.response_mask
    out = {}
    for packing in ("off", "on"):
        torch.manual_seed(0)  # the value head's init
        critic = Critic.from_pretrained(str(tiny_model_dir), micro_batch_tokens=10_000, packing=packing)
        _sgd(critic, 1e-1)
        values = critic.values(batch)
        m = critic.train_step(batch, returns, values)
        out[packing] = (values, m, critic.module)
    (v0, m0, mod0), (v1, m1, mod1) = out["off"], out["on"]
    assert torch.allclose(v0, v1, atol=TOL)
    assert m0["value_loss"] == pytest.approx(m1["value_loss"], rel=TOL)
    assert m0["grad_norm"] == pytest.approx(m1["grad_norm"], rel=TOL) and m0["grad_norm"] > 0
    _assert_same_params(mod0, mod1)


@pytest.mark.parametrize("packing", ["off", "on", "auto"])
def test_budget_holds_for_one_long_and_many_short(packing):
    """One 16k-token sequence and 200 of ~300 tokens: every micro-batch within the budget, every sequence in
    exactly one; a sequence longer than the budget is a micro-batch of its own."""
    g = torch.Generator().manual_seed(0)
    lens = [16_000] + [int(x) for x in torch.randint(250, 350, (200,), generator=g)] + [20_000]
    batch = TokenBatch([torch.zeros(n, dtype=torch.long) for n in lens], [100] * len(lens))
    budget = 16_384
    cost = AttentionCost(pair=6.6e-5, document_masks=packing == "auto")
    layout = plan_layout(batch, budget, packing=packing, cost=cost)
    assert sorted(i for block in layout.blocks for i in block) == list(range(len(lens)))
    assert [len(lens) - 1] in layout.blocks  # the over-budget sequence, alone
    for block in layout.blocks:
        if block == [len(lens) - 1]:
            continue
        size = sum(lens[i] for i in block) if layout.packed else len(block) * max(lens[i] for i in block)
        assert size <= budget
    assert layout.tokens == sum(lens)
    if layout.packed:
        assert layout.padding_share == 0.0


def test_auto_packs_only_when_cheaper():
    """With a kernel that skips other documents, packing wins as soon as it saves padding; with a dense masked
    square (sdpa) a long packed row costs more attention than it saves, so auto keeps the padded blocks."""
    lens = [600, 90, 80, 70, 60, 50, 40, 30]
    batch = TokenBatch([torch.zeros(n, dtype=torch.long) for n in lens], [10] * len(lens))
    doc = plan_layout(batch, 1200, packing="auto", cost=AttentionCost(pair=1e-2, document_masks=True))
    dense = plan_layout(batch, 1200, packing="auto", cost=AttentionCost(pair=1e-2, document_masks=False))
    assert doc.packed and not dense.packed
    padded = plan_layout(batch, 1200, packing="off")
    assert padded.padding_share > 0.1 and doc.padding_share == 0.0
    assert layout_cost(lens, doc.blocks, True, AttentionCost()) == sum(lens)  # no attention term: tokens


def test_attention_cost_of_qwen2_and_llama_configs():
    from transformers import LlamaConfig, Qwen2Config

    qwen = Qwen2Config(**QWEN25_1_5B)
    qwen._attn_implementation = "sdpa"
    c = attention_cost(qwen)
    per_token = 2 * 1536 * (12 + 2) * 128 + 3 * 1536 * 8960
    assert c.pair == pytest.approx(2 * 12 * 128 / per_token) and not c.document_masks
    llama = LlamaConfig(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_hidden_layers=2)
    llama._attn_implementation = "flex_attention"
    assert attention_cost(llama).document_masks


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_transformers_reads_restarting_positions_as_document_boundaries(arch):
    """The contract packing relies on: with no attention mask, position ids that restart at 0 keep each
    sequence's attention to itself (sdpa and eager), for Llama and Qwen2 configs."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    cfg_cls, lm_cls = (LlamaConfig, LlamaForCausalLM) if arch == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    torch.manual_seed(0)
    for impl in ("sdpa", "eager"):
        cfg = cfg_cls(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
        cfg._attn_implementation = impl
        lm = lm_cls(cfg).eval()
        a, b = torch.randint(0, 64, (1, 9)), torch.randint(0, 64, (1, 4))
        with torch.no_grad():
            want = torch.cat(
                [lm.model(input_ids=a).last_hidden_state, lm.model(input_ids=b).last_hidden_state], 1
            )
            pos = torch.cat([torch.arange(9), torch.arange(4)])[None]
            got = lm.model(
                input_ids=torch.cat([a, b], 1), position_ids=pos, use_cache=False
            ).last_hidden_state
        assert torch.allclose(got, want, atol=TOL), impl
