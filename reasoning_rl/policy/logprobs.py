"""Memory-aware log-probs and entropy of target tokens from hidden states.

Only response positions reach the LM head, in chunks of ``chunk_tokens`` rows: float32 logits exist
for one chunk at a time. Under autograd each chunk is checkpointed, so the backward pass recomputes
that chunk's logits instead of keeping [tokens, vocab] activations alive. With ``compiled=True`` the
per-chunk math is one ``torch.compile``d function: the vocab-wide passes (cast, log-sum-exp, gather,
entropy, and their backward) fuse into a few kernels instead of a dozen memory-bound ones.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

ChunkFn = Callable[[Callable[[Tensor], Tensor], Tensor, Tensor, float], tuple[Tensor, Tensor]]


def _chunk(
    head: Callable[[Tensor], Tensor], h: Tensor, targets: Tensor, temperature: float
) -> tuple[Tensor, Tensor]:
    logits = head(h).float()
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets[:, None]).squeeze(-1) - lse
    entropy = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return logp, entropy


@cache
def _compiled_chunk() -> ChunkFn:
    fn: ChunkFn = torch.compile(_chunk, dynamic=True)
    return fn


def _chunk_starts(rows: int, chunk_tokens: int, compiled: bool) -> list[tuple[int, int]]:
    """(start, first row kept) per chunk. Compiled: a last chunk of one row starts a row early (its first
    output is dropped), because ``dynamic=True`` specialises a size of 1 and would recompile (issue 20)."""
    out = []
    for start in range(0, rows, chunk_tokens):
        early = compiled and rows - start == 1 and start > 0
        out.append((start - 1, 1) if early else (start, 0))
    return out


def token_logprobs(
    head: Callable[[Tensor], Tensor],
    hidden: Tensor,
    targets: Tensor,
    *,
    chunk_tokens: int = 1024,
    temperature: float = 1.0,
    compiled: bool = False,
) -> tuple[Tensor, Tensor]:
    """(log p(target), entropy) per row of ``hidden`` [R, H] -> two [R] float32 tensors."""
    if hidden.shape[0] != targets.shape[0]:
        raise ValueError(f"{hidden.shape[0]} hidden rows for {targets.shape[0]} targets")
    rows = hidden.shape[0]
    if compiled and rows == 1:  # one row in all: score it twice, keep one (no size-1 graph, as above)
        lp, ent = token_logprobs(
            head,
            hidden.repeat(2, 1),
            targets.repeat(2),
            chunk_tokens=2,
            temperature=temperature,
            compiled=True,
        )
        return lp[:1], ent[:1]
    fn = _compiled_chunk() if compiled else _chunk
    grad = torch.is_grad_enabled() and hidden.requires_grad
    outs_lp, outs_ent = [], []
    for start, keep in _chunk_starts(rows, chunk_tokens, compiled):
        end = min(start + keep + chunk_tokens, rows)
        h, t = hidden[start:end], targets[start:end]
        if grad:
            lp, ent = checkpoint(fn, head, h, t, temperature, use_reentrant=False)
        else:
            lp, ent = fn(head, h, t, temperature)
        outs_lp.append(lp[keep:])
        outs_ent.append(ent[keep:])
    if not outs_lp:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return torch.cat(outs_lp), torch.cat(outs_ent)
