"""Token batches for training: variable-length sequences, packed (no padding) into micro-batches.

A ``TokenBatch`` holds B sequences (prompt + response ids, 1-D LongTensors) and each prompt length.
Per-response-token quantities (log-probs, advantages per token, masks) are padded [B, T] tensors,
T = longest response in the batch, with ``response_mask`` marking real tokens. Micro-batches group
sequences of similar length (longest first) into a right-padded [b, L] block under a token budget that
counts the padding: right padding needs no attention mask (causal attention never looks forward), so the
model runs plain causal attention, which takes the fused flash kernels; a packed row would need a
block-diagonal mask and falls back to dense masked attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

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


@dataclass
class MicroBatch:
    """Sequences ``rows`` of a batch as a right-padded block; ``gather``/``targets`` pick response tokens."""

    rows: list[int]
    input_ids: Tensor  # [b, L], right-padded
    gather: Tensor  # [R] flat positions (row * L + t) whose hidden state predicts a response token
    targets: Tensor  # [R] those response tokens
    lens: list[int]  # response length of each row, in order (R = sum)


def plan_micro_batches(batch: TokenBatch, token_budget: int, max_seqs: int | None = None) -> list[list[int]]:
    """Split rows into micro-batches whose padded size (rows x longest) stays within ``token_budget``.

    Rows are taken longest first (ties in batch order), so each block pads little. Deterministic and
    independent of the data: it depends only on sequence lengths.
    """
    if token_budget < 1:
        raise ValueError(f"micro_batch_tokens must be >= 1; got {token_budget}")
    if max_seqs is not None and max_seqs > len(batch):
        raise ValueError(
            f"micro_batch_size={max_seqs} exceeds the batch of {len(batch)} sequences on this rank; "
            "lower micro_batch_size or raise the (mini-)batch size"
        )
    lengths = [int(seq.numel()) for seq in batch.sequences]
    for i, n in enumerate(lengths):
        if n > token_budget:
            raise ValueError(
                f"sequence {i} has {n} tokens, more than micro_batch_tokens={token_budget}; "
                "raise micro_batch_tokens or lower the prompt/response length limits"
            )
    plans: list[list[int]] = []
    current: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda k: -lengths[k]):
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


def pack(batch: TokenBatch, rows: list[int], device: torch.device | str = "cpu") -> MicroBatch:
    """Right-pad ``rows`` into one [len(rows), longest] block (padding is never attended to)."""
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


def unflatten(values: Tensor, lens: list[int], width: int) -> Tensor:
    """Flat per-response-token values [R] -> right-padded [len(lens), width] (differentiable)."""
    out = values.new_zeros((len(lens), width))
    mask = (
        torch.arange(width, device=values.device)[None, :] < torch.tensor(lens, device=values.device)[:, None]
    )
    return out.masked_scatter(mask, values)
