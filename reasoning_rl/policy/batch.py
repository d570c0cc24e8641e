"""Token batches for training: variable-length sequences, laid out into micro-batches under a token budget.

A ``TokenBatch`` holds B sequences (prompt + response ids, 1-D LongTensors) and each prompt length.
Per-response-token quantities (log-probs, advantages per token, masks) are padded [B, T] tensors,
T = longest response in the batch, with ``response_mask`` marking real tokens.

Two micro-batch layouts, both bounded by the same token budget (positions computed, padding included):

- padded: sequences of similar length (longest first) in a right-padded [b, L] block. Right padding needs
  no attention mask (causal attention never looks forward), so the model runs plain causal attention (the
  fused flash kernels), but every row pays for the block's longest sequence.
- packed: sequences concatenated into one row, ``position_ids`` restarting at 0 for each. transformers reads
  the restarts as document boundaries (``masking_utils.find_packed_sequence_indices``): a block-diagonal
  causal mask for sdpa/eager, a document ``BlockMask`` for FlexAttention, cu_seqlens for flash varlen. No
  padding at all, but sdpa/eager then compute the dense masked square of the row.

``plan_layout`` picks between them (``packing``: auto | on | off); ``auto`` takes the layout with the lower
estimated cost (``AttentionCost``: tokens through the weights plus attended pairs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from reasoning_rl.rollout.base import Completion


@dataclass
class TokenBatch:
    """B sequences for the policy. ``rollout_logprobs``: the engine's log-probs [B, T], if known.
    ``model_mask`` [B, T] bool: False on response tokens the model did not produce (inserted tool turns of a
    multi-turn rollout), which ``response_mask`` then leaves out of every loss, KL and advantage."""

    sequences: list[Tensor]
    prompt_lens: list[int]
    rollout_logprobs: Tensor | None = None
    pad_id: int = 0
    model_mask: Tensor | None = None
    response_lens: list[int] = field(init=False)

    def __post_init__(self) -> None:
        if len(self.sequences) != len(self.prompt_lens):
            raise ValueError(f"{len(self.sequences)} sequences but {len(self.prompt_lens)} prompt lengths")
        self.sequences = [torch.as_tensor(s, dtype=torch.long).reshape(-1) for s in self.sequences]
        self.response_lens = []
        for i, (seq, p) in enumerate(zip(self.sequences, self.prompt_lens, strict=True)):
            if p < 1:
                raise ValueError(
                    f"sequence {i}: prompt length {p} < 1 (the first response token needs a context)"
                )
            if seq.numel() <= p:
                raise ValueError(f"sequence {i}: no response tokens ({seq.numel()} tokens, prompt {p})")
            self.response_lens.append(seq.numel() - p)
        if self.rollout_logprobs is not None and tuple(self.rollout_logprobs.shape) != self.shape:
            raise ValueError(
                f"rollout_logprobs {tuple(self.rollout_logprobs.shape)} != batch shape {self.shape}"
            )
        if self.model_mask is not None and tuple(self.model_mask.shape) != self.shape:
            raise ValueError(f"model_mask {tuple(self.model_mask.shape)} != batch shape {self.shape}")

    def __len__(self) -> int:
        return len(self.sequences)

    @property
    def shape(self) -> tuple[int, int]:
        """(B, T): the shape of per-response-token tensors."""
        return (len(self.sequences), max(self.response_lens, default=0))

    @property
    def num_tokens(self) -> int:
        return sum(int(s.numel()) for s in self.sequences)

    @property
    def response_mask(self) -> Tensor:
        """[B, T] bool, True on real response tokens the model produced (the loss mask)."""
        b, t = self.shape
        lens = torch.tensor(self.response_lens)
        real = torch.arange(t)[None, :].expand(b, t) < lens[:, None]
        return real if self.model_mask is None else real & self.model_mask.bool()

    def response_ids(self) -> Tensor:
        """[B, T] response token ids, ``pad_id`` beyond each response."""
        return self.pad(
            [s[p:].tolist() for s, p in zip(self.sequences, self.prompt_lens, strict=True)], self.pad_id
        )

    def pad(self, rows: Sequence[Sequence[float] | Tensor], value: float = 0.0) -> Tensor:
        """Right-pad per-response lists (one per sequence) to a [B, T] tensor."""
        b, t = self.shape
        if len(rows) != b:
            raise ValueError(f"{len(rows)} rows for a batch of {b}")
        dtype = torch.long if isinstance(value, int) and not isinstance(value, bool) else torch.float32
        out = torch.full((b, t), value, dtype=dtype)
        for i, row in enumerate(rows):
            r = torch.as_tensor(row, dtype=dtype)
            if r.numel() != self.response_lens[i]:
                raise ValueError(
                    f"row {i} has {r.numel()} values for {self.response_lens[i]} response tokens"
                )
            out[i, : r.numel()] = r
        return out

    def select(self, indices: Sequence[int]) -> TokenBatch:
        """The sub-batch of these rows (e.g. a data-parallel shard or a PPO mini-batch)."""
        idx = list(indices)
        sub = TokenBatch(
            [self.sequences[i] for i in idx], [self.prompt_lens[i] for i in idx], pad_id=self.pad_id
        )
        if self.rollout_logprobs is not None:
            sub.rollout_logprobs = self.rollout_logprobs[idx, : sub.shape[1]]
        if self.model_mask is not None:
            sub.model_mask = self.model_mask[idx, : sub.shape[1]]
        return sub


def build_batch(completions: Sequence[Completion], pad_id: int = 0) -> TokenBatch:
    """A ``TokenBatch`` of prompt + response for each completion, with the engine's log-probs and, for tool
    rollouts, which response tokens the model produced (``Completion.mask``)."""
    if not completions:
        raise ValueError("build_batch needs at least one completion")
    seqs, plens, lps = [], [], []
    for k, c in enumerate(completions):
        if not c.token_ids:
            raise ValueError(
                f"completion {k} (prompt {c.prompt_index}, sample {c.sample_index}) has no tokens"
            )
        seqs.append(torch.tensor(list(c.prompt_ids) + list(c.token_ids), dtype=torch.long))
        plens.append(len(c.prompt_ids))
        lps.append(c.logprobs)
    batch = TokenBatch(seqs, plens, pad_id=pad_id)
    if all(len(lp) == len(c.token_ids) for lp, c in zip(lps, completions, strict=True)):
        batch.rollout_logprobs = batch.pad(lps)
    if any(c.mask is not None for c in completions):
        rows = [c.mask if c.mask is not None else [1] * len(c.token_ids) for c in completions]
        batch.model_mask = batch.pad(rows, 0).bool()
    return batch


Packing = Literal["auto", "on", "off"]


@dataclass
class MicroBatch:
    """Sequences ``rows`` of a batch as one model input; ``gather``/``targets`` pick response tokens.

    Padded: ``input_ids`` [len(rows), L], one sequence per row, ``position_ids`` None (the default 0..L-1).
    Packed: ``input_ids`` [1, n], the sequences one after another, ``position_ids`` [1, n] restarting at 0."""

    rows: list[int]
    input_ids: Tensor  # [b, L]
    gather: Tensor  # [R] flat positions (row * L + t) whose hidden state predicts a response token
    targets: Tensor  # [R] those response tokens
    lens: list[int]  # response length of each sequence of ``rows``, in order (R = sum)
    position_ids: Tensor | None = None


@dataclass(frozen=True)
class AttentionCost:
    """What attention costs next to the weights, for choosing a layout.

    ``pair``: the multiply-adds of one attended (query, key) pair over those of one token through the
    weights (per layer: ``2 heads head_dim / (2 hidden (heads + kv_heads) head_dim + 3 hidden intermediate)``).
    ``document_masks``: the attention kernel skips other documents of a packed row (FlexAttention, flash
    varlen); False for sdpa/eager, which compute the whole masked square of the row."""

    pair: float = 0.0
    document_masks: bool = False


def attention_cost(config: Any) -> AttentionCost:
    """The ``AttentionCost`` of an HF decoder config (pair 0 when its shape fields are missing)."""
    impl = str(getattr(config, "_attn_implementation", None) or "sdpa")
    doc = "flex" in impl or "flash" in impl
    try:
        h, heads = int(config.hidden_size), int(config.num_attention_heads)
        kv = int(getattr(config, "num_key_value_heads", None) or heads)
        hd = int(getattr(config, "head_dim", None) or h // heads)
        inter = int(getattr(config, "intermediate_size", None) or 4 * h)
    except (AttributeError, TypeError):
        return AttentionCost(0.0, doc)
    per_token = 2 * h * (heads + kv) * hd + 3 * h * inter
    return AttentionCost(2 * heads * hd / per_token, doc)


@dataclass(frozen=True)
class Layout:
    """Micro-batches of a batch: each ``blocks`` entry is the rows of one forward (one packed row when
    ``packed``). ``tokens``: real tokens; ``slots``: positions the model computes (padding included)."""

    blocks: list[list[int]]
    packed: bool
    tokens: int
    slots: int
    largest: int  # positions of the largest micro-batch: what the memory plan's token budget bounds

    @property
    def padding_share(self) -> float:
        """Share of the computed positions that are padding (0 when packed)."""
        return 1.0 - self.tokens / self.slots if self.slots else 0.0


def _lengths(batch: TokenBatch, token_budget: int, max_seqs: int | None) -> list[int]:
    if token_budget < 1:
        raise ValueError(f"micro_batch_tokens must be >= 1; got {token_budget}")
    if max_seqs is not None and max_seqs > len(batch):
        raise ValueError(
            f"micro_batch_size={max_seqs} exceeds the batch of {len(batch)} sequences on this rank; "
            "lower micro_batch_size or raise the (mini-)batch size"
        )
    return [int(seq.numel()) for seq in batch.sequences]


def _longest_first(lengths: list[int], rows: Sequence[int] | None) -> list[int]:
    return sorted(range(len(lengths)) if rows is None else rows, key=lambda k: -lengths[k])


def plan_micro_batches(
    batch: TokenBatch, token_budget: int, max_seqs: int | None = None, rows: Sequence[int] | None = None
) -> list[list[int]]:
    """Split ``rows`` (default: all) into right-padded blocks whose size (rows x longest) stays within
    ``token_budget``; a sequence longer than the budget is a block of its own.

    Rows are taken longest first (ties in batch order), so each block pads little. Deterministic and
    independent of the data: it depends only on sequence lengths.
    """
    lengths = _lengths(batch, token_budget, max_seqs)
    plans: list[list[int]] = []
    current: list[int] = []
    for i in _longest_first(lengths, rows):
        width = lengths[current[0]] if current else lengths[i]  # longest first: the block's first row sets L
        full = (len(current) + 1) * width > token_budget or (
            max_seqs is not None and len(current) >= max_seqs
        )
        if current and full:
            plans.append(current)
            current = []
        current.append(i)
    if current:
        plans.append(current)
    return plans


def plan_packed(
    batch: TokenBatch, token_budget: int, max_seqs: int | None = None, rows: Sequence[int] | None = None
) -> list[list[int]]:
    """Pack ``rows`` (default: all) into rows of at most ``token_budget`` tokens (first-fit decreasing: each
    sequence, longest first, goes to the first row with room); a sequence longer than the budget is a row of
    its own. Deterministic: it depends only on sequence lengths."""
    lengths = _lengths(batch, token_budget, max_seqs)
    bins: list[list[int]] = []
    used: list[int] = []
    for i in _longest_first(lengths, rows):
        n = lengths[i]
        for b, members in enumerate(bins):
            if used[b] + n <= token_budget and (max_seqs is None or len(members) < max_seqs):
                members.append(i)
                used[b] += n
                break
        else:
            bins.append([i])
            used.append(n)
    return bins


def layout_cost(lengths: Sequence[int], blocks: list[list[int]], packed: bool, cost: AttentionCost) -> float:
    """Estimated work of a layout in token-equivalents: positions through the weights, plus attended pairs
    times ``cost.pair`` (causal: half the square; a dense masked packed row: the whole square)."""
    total = 0.0
    for block in blocks:
        lens = [lengths[i] for i in block]
        if packed:
            n = sum(lens)
            pairs = sum(x * x for x in lens) / 2 if cost.document_masks else float(n * n)
            total += n + cost.pair * pairs
        else:
            width = max(lens)
            total += len(lens) * (width + cost.pair * width * width / 2)
    return total


def plan_layout(
    batch: TokenBatch,
    token_budget: int,
    *,
    max_seqs: int | None = None,
    packing: Packing = "off",
    cost: AttentionCost = AttentionCost(),
    rows: Sequence[int] | None = None,
) -> Layout:
    """The micro-batches of ``rows`` (default: all) under ``token_budget``: right-padded blocks, packed rows
    (``packing="on"``), or whichever ``layout_cost`` estimates cheaper (``"auto"``; padded on a tie)."""
    lengths = [int(seq.numel()) for seq in batch.sequences]
    padded = plan_micro_batches(batch, token_budget, max_seqs, rows)
    tokens = sum(lengths[i] for block in padded for i in block)
    blocks, packed = padded, False
    if packing != "off":
        rows_packed = plan_packed(batch, token_budget, max_seqs, rows)
        if packing == "on" or layout_cost(lengths, rows_packed, True, cost) < layout_cost(
            lengths, padded, False, cost
        ):
            blocks, packed = rows_packed, True
    sizes = [block_slots(lengths, block, packed) for block in blocks]
    return Layout(blocks, packed, tokens, sum(sizes), max(sizes, default=0))


def block_slots(lengths: Sequence[int], block: Sequence[int], packed: bool) -> int:
    """Positions one micro-batch computes: its sequences back to back when packed, else rows x its longest."""
    lens = [lengths[i] for i in block]
    return sum(lens) if packed else len(lens) * max(lens)


@dataclass
class MicroBatching:
    """How one model splits a batch into forwards: the token budget of a micro-batch (positions computed,
    padding included; the one number a memory plan sets), an optional cap on sequences per micro-batch,
    the layout choice and the model's ``AttentionCost``. Read at every pass, so assigning ``token_budget``
    takes effect on the next one."""

    token_budget: int
    max_seqs: int | None = None
    packing: Packing = "auto"
    cost: AttentionCost = AttentionCost()

    def __post_init__(self) -> None:
        if self.token_budget < 1:
            raise ValueError(f"micro_batch_tokens must be >= 1; got {self.token_budget}")
        if self.max_seqs is not None and self.max_seqs < 1:
            raise ValueError(f"micro_batch_size must be >= 1; got {self.max_seqs}")
        if self.packing not in ("auto", "on", "off"):
            raise ValueError(f"packing must be auto, on or off; got {self.packing!r}")

    def layout(
        self, batch: TokenBatch, rows: Sequence[int] | None = None, *, training: bool = True
    ) -> Layout:
        """``plan_layout`` of ``rows`` (default: all) under these settings; ``max_seqs`` bounds the training
        passes only (a no-grad scoring pass keeps no activations for a backward)."""
        return plan_layout(
            batch,
            self.token_budget,
            max_seqs=self.max_seqs if training else None,
            packing=self.packing,
            cost=self.cost,
            rows=rows,
        )


def pack(
    batch: TokenBatch, rows: list[int], device: torch.device | str = "cpu", *, packed: bool = False
) -> MicroBatch:
    """``rows`` as one model input: a right-padded [len(rows), longest] block (padding is never attended
    to), or with ``packed`` one [1, n] row of the sequences back to back with restarting ``position_ids``."""
    if packed:
        return _pack_row(batch, rows, device)
    width = max(int(batch.sequences[i].numel()) for i in rows)
    ids = torch.full((len(rows), width), batch.pad_id, dtype=torch.long)
    gather, targets, lens = [], [], []
    for r, i in enumerate(rows):
        seq, p = batch.sequences[i], batch.prompt_lens[i]
        n = int(seq.numel())
        ids[r, :n] = seq
        gather.append(torch.arange(r * width + p - 1, r * width + n - 1))
        targets.append(seq[p:])
        lens.append(n - p)
    return MicroBatch(
        rows=list(rows),
        input_ids=ids.to(device),
        gather=torch.cat(gather).to(device),
        targets=torch.cat(targets).to(device),
        lens=lens,
    )


def _pack_row(batch: TokenBatch, rows: list[int], device: torch.device | str) -> MicroBatch:
    seqs = [batch.sequences[i] for i in rows]
    gather, targets, lens = [], [], []
    start = 0
    for seq, i in zip(seqs, rows, strict=True):
        p, n = batch.prompt_lens[i], int(seq.numel())
        gather.append(torch.arange(start + p - 1, start + n - 1))
        targets.append(seq[p:])
        lens.append(n - p)
        start += n
    return MicroBatch(
        rows=list(rows),
        input_ids=torch.cat(seqs)[None].to(device),
        gather=torch.cat(gather).to(device),
        targets=torch.cat(targets).to(device),
        lens=lens,
        position_ids=torch.cat([torch.arange(int(s.numel())) for s in seqs])[None].to(device),
    )


def unflatten(values: Tensor, lens: list[int], width: int) -> Tensor:
    """Flat per-response-token values [R] -> right-padded [len(lens), width] (differentiable)."""
    out = values.new_zeros((len(lens), width))
    mask = (
        torch.arange(width, device=values.device)[None, :] < torch.tensor(lens, device=values.device)[:, None]
    )
    return out.masked_scatter(mask, values)
