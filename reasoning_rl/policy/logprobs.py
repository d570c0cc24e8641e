"""Memory-aware log-probs and entropy of target tokens from hidden states.

Only response positions reach the LM head, in chunks of ``chunk_tokens`` rows: float32 logits exist
for one chunk at a time. Under autograd each chunk is checkpointed, so the backward pass recomputes
that chunk's logits instead of keeping [tokens, vocab] activations alive.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint


def _chunk(head: Callable[[Tensor], Tensor], h: Tensor, targets: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    logits = head(h).float()
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def token_logprobs(
    head: Callable[[Tensor], Tensor],
    hidden: Tensor,
    targets: Tensor,
    *,
    chunk_tokens: int = 1024,
    temperature: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """(log p(target), entropy) per row of ``hidden`` [R, H] -> two [R] float32 tensors."""
    if hidden.shape[0] != targets.shape[0]:
        raise ValueError(f"{hidden.shape[0]} hidden rows for {targets.shape[0]} targets")
    grad = torch.is_grad_enabled() and hidden.requires_grad
    outs_lp, outs_ent = [], []
    for start in range(0, hidden.shape[0], chunk_tokens):
        h, t = hidden[start : start + chunk_tokens], targets[start : start + chunk_tokens]
        if grad:
            lp, ent = checkpoint(_chunk, head, h, t, temperature, use_reentrant=False)
        else:
            lp, ent = _chunk(head, h, t, temperature)
        outs_lp.append(lp)
        outs_ent.append(ent)
    if not outs_lp:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return torch.cat(outs_lp), torch.cat(outs_ent)
