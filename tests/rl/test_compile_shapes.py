"""The compiled update compiles once for every micro-batch shape (issue 20: a recompile per new shape)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from reasoning_rl.algorithms import LossConfig  # noqa: E402
from reasoning_rl.policy import Policy, TokenBatch, plan_micro_batches  # noqa: E402

BUDGET, CHUNK = 64, 8


def batch_of(lens: list[int], seed: int) -> TokenBatch:
    g = torch.Generator().manual_seed(seed)
    return TokenBatch([torch.randint(7, 90, (n,), generator=g) for n in lens], [3] * len(lens))


@pytest.mark.slow
def test_one_compile_serves_every_block_width_row_count_and_chunk(tiny_model_dir):
    """Blocks of 1-5 rows, widths 9-40, log-prob chunks of 1-8 rows: no graph after the first step's.

    Fails on the old code: ``dynamic=True`` alone specialises a size of 1, so the first one-row block (and the
    first one-row log-prob chunk) recompiled every decoder layer."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    policy = Policy.from_pretrained(
        str(tiny_model_dir),
        lr=1e-3,
        micro_batch_tokens=BUDGET,
        chunk_tokens=CHUNK,
        compile_layers=True,
        packing="off",  # the padded blocks' shapes; packed rows: the test below
    )

    def step(lens: list[int], seed: int) -> int:
        batch = batch_of(lens, seed)
        policy.logprobs(batch)  # the no-grad scoring graph
        policy.train_step(batch, torch.linspace(-1, 1, len(lens)), None, None, LossConfig())
        return int(counters["stats"]["unique_graphs"])

    first = step([12, 12, 10, 9], 0)  # one 4-row block of width 12; 31 response tokens: chunks of 8 and 7
    assert first >= 2
    later = [[17, 15, 15], [23, 8, 8, 8, 5], [40, 9, 9], [12], [30, 29]]
    blocks = [[len(p) for p in plan_micro_batches(batch_of(lens, 0), BUDGET)] for lens in later]
    assert 1 in blocks[2] and blocks[3] == [1]  # one-row blocks; [12]: 9 tokens = 8 + 1 chunk
    for k, lens in enumerate(later, start=1):
        assert step(lens, k) == first, f"recompiled on micro-batches {lens}"
    assert step([36, 9, 9, 4], 9) == first

    # The same numbers as eager on a batch with a one-row block (width 36: 33 response tokens, so its last
    # log-prob chunk has one row).
    eager = Policy.from_pretrained(
        str(tiny_model_dir), micro_batch_tokens=BUDGET, chunk_tokens=CHUNK, packing="off"
    )
    eager.lm.load_state_dict(policy.lm.state_dict())
    batch = batch_of([36, 9, 9, 4], 9)
    assert len(plan_micro_batches(batch, BUDGET)[0]) == 1
    (lp_c, ent_c), (lp_e, ent_e) = (p.logprobs(batch, with_entropy=True) for p in (policy, eager))
    assert ent_c is not None and ent_e is not None
    assert torch.allclose(lp_c, lp_e, atol=1e-5) and torch.allclose(ent_c, ent_e, atol=1e-4)


@pytest.mark.slow
def test_packed_rows_compile_once_for_every_row_length(tiny_model_dir):
    """Packed rows (``packing=on``): one set of graphs for a row with document boundaries (the mask) and one for
    a row of a single sequence (plain causal), then none for any other row length or sequence count."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    policy = Policy.from_pretrained(
        str(tiny_model_dir),
        lr=1e-3,
        micro_batch_tokens=BUDGET,
        chunk_tokens=CHUNK,
        compile_layers=True,
        packing="on",
    )

    def step(lens: list[int], seed: int) -> int:
        batch = batch_of(lens, seed)
        policy.logprobs(batch)
        policy.train_step(batch, torch.linspace(-1, 1, len(lens)), None, None, LossConfig())
        return int(counters["stats"]["unique_graphs"])

    step([12, 12, 10, 9], 0)
    warm = step([12], 1)
    for k, lens in enumerate([[17, 15, 15], [23, 8, 8, 8, 5], [40, 9, 9], [30, 29], [36, 9, 9, 4]], start=2):
        assert step(lens, k) == warm, f"recompiled on packed rows {lens}"
