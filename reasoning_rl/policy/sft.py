"""The supervised step on the policy: token-level cross-entropy over the loss mask, on the RL machinery.

The same micro-batch layouts (padded or packed under the token budget), FSDP2 collectives, activation offload,
clipping, AdamW step and LR schedule as ``Policy.train_step``; only the loss differs. ``batch.response_mask``
is the loss mask (``TokenBatch.model_mask`` marks the assistant's tokens, as it marks the model's tokens of a
tool rollout). The loss of a step is the sum of masked token NLLs over ``normalizer`` (the step's masked tokens
over all ranks), and gradients are summed across ranks, so a step does not depend on the micro-batching, the
layout or the number of ranks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from reasoning_rl import dist
from reasoning_rl.policy.batch import TokenBatch, pack, unflatten
from reasoning_rl.policy.policy import Policy
from reasoning_rl.policy.train_state import clip_and_step, saved_tensors_on_host
from reasoning_rl.policy.wrap import equalize, forward_micro, response_hidden


def sft_step(policy: Policy, batch: TokenBatch, normalizer: float) -> dict[str, float]:
    """One optimizer step of masked cross-entropy on this rank's ``batch``. Collective under FSDP2.
    Returns loss (mean NLL per masked token, all ranks), grad_norm, lr, tokens (masked, all ranks),
    micro_batches, packed, padding_share."""
    if normalizer <= 0:
        raise ValueError(f"normalizer must be > 0 (the step's loss tokens); got {normalizer}")
    mask = batch.response_mask
    layout = policy.batching.layout(batch)
    world = dist.world_size() if policy.fsdp else 1
    sums = torch.zeros(2)
    for rows in equalize(layout.blocks) if policy.fsdp else layout.blocks:
        if rows is None:  # a dummy pass so FSDP2's collectives line up across ranks; contributes 0
            lp_flat, _ = forward_micro(policy.module, pack(batch, [0], policy.device))
            (lp_flat.sum() * 0.0).backward()
            continue
        mb = pack(batch, rows, policy.device, packed=layout.packed)
        with saved_tensors_on_host(policy.activation_offload, policy.device):
            lp_flat, _ = forward_micro(policy.module, mb)
        width = max(mb.lens)
        lp = unflatten(lp_flat.float(), mb.lens, width)
        m = mask[rows, :width].to(lp.device, lp.dtype)
        nll = -(lp * m).sum()
        # FSDP2 averages gradients over ranks; scaling by world size turns that into the sum.
        (nll * (world / normalizer)).backward()
        sums += torch.stack([nll.detach().cpu(), m.sum().cpu()])
    sums = dist.all_reduce_sum(sums)
    lr = float(policy.optimizer.param_groups[0]["lr"])
    grad_norm = clip_and_step(policy.module, policy.optimizer, policy.grad_clip)
    counts = dist.all_reduce_sum(torch.tensor([float(layout.tokens), float(layout.slots)]))
    policy.scheduler.step()
    policy.step += 1
    return {
        "loss": float(sums[0] / sums[1]) if float(sums[1]) else 0.0,
        "grad_norm": grad_norm,
        "lr": lr,
        "tokens": float(sums[1]),
        "micro_batches": float(len(layout.blocks)),
        "packed": float(layout.packed),
        "padding_share": 1.0 - float(counts[0] / counts[1]) if float(counts[1]) else 0.0,
    }


@contextmanager
def _root_gathered(policy: Policy, batch: TokenBatch) -> Iterator[None]:
    """The root's FSDP2 parameters (embeddings, final norm, LM head) gathered while the LM is called below
    the root module (the decoder layers gather their own in their forward)."""
    if not policy.fsdp:
        yield
        return
    module: Any = policy.module
    # FSDP2 sets up its hooks from the root's first forward; calling the layers first (an eval before any
    # training step) would set each one up as a root of its own. One scoring forward of one row does it.
    forward_micro(module, pack(batch, [0], policy.device))
    module.unshard()
    try:
        yield
    finally:
        module.reshard()


def sft_eval(policy: Policy, batch: TokenBatch) -> dict[str, float]:
    """Summed masked NLL, correct greedy predictions and masked tokens of this rank's ``batch``, summed over
    ranks (collective under FSDP2): eval loss = nll / tokens, token accuracy = correct / tokens."""
    mask = batch.response_mask
    layout = policy.batching.layout(batch, training=False)
    sums = torch.zeros(3, dtype=torch.float64)
    module = policy.module
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad(), _root_gathered(policy, batch):
            head = policy.lm.get_output_embeddings()
            for rows in equalize(layout.blocks) if policy.fsdp else layout.blocks:
                if rows is None:
                    mb = pack(batch, [0], policy.device)
                    response_hidden(policy.lm, mb.input_ids, mb.gather, mb.position_ids)
                    continue
                mb = pack(batch, rows, policy.device, packed=layout.packed)
                hidden = response_hidden(policy.lm, mb.input_ids, mb.gather, mb.position_ids)
                width = max(mb.lens)
                m = mask[rows, :width]
                flat = m[unflatten(torch.ones(len(mb.targets)), mb.lens, width).bool()].to(policy.device)
                for start in range(0, len(mb.targets), 1024):  # one chunk of float32 logits at a time
                    logits = head(hidden[start : start + 1024]).float()
                    t = mb.targets[start : start + 1024]
                    keep = flat[start : start + 1024].double()
                    lp = torch.log_softmax(logits, -1).gather(-1, t[:, None]).squeeze(-1).double()
                    right = (logits.argmax(-1) == t).double()
                    sums += torch.stack([-(lp * keep).sum(), (right * keep).sum(), keep.sum()]).cpu()
    finally:
        module.train(was_training)
    sums = dist.all_reduce_sum(sums)
    return {"nll": float(sums[0]), "correct": float(sums[1]), "tokens": float(sums[2])}
