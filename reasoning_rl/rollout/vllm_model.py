"""``apply_model`` targets of the vLLM engine: read back the weights vLLM computes with (the freshness gate's
fingerprints), copy new weights straight into them where that is exact, and re-tie a tied LM head after a reload.
They run inside vLLM's worker, on its model."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from reasoning_rl.rollout.base import RolloutError
from reasoning_rl.rollout.fingerprints import Fingerprint, fingerprint_tensors


def fingerprint_model(model: torch.nn.Module) -> tuple[dict[str, Fingerprint], dict[str, list[str]]]:
    """Fingerprint every parameter of the served model, read back from where vLLM computes with it.

    On CPU vLLM pre-packs each linear layer's weight for oneDNN/SGL kernels and leaves an empty ``weight``;
    that layer's weight is recovered exactly by running its packed GEMM on the identity (x = I gives
    x @ W^T = W^T: every output is one product with 1.0 plus exact zeros), so the check sees what the
    kernels use, not a stale copy. Shared (tied) parameters are counted once, under their first name.
    """
    named: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()
    with torch.no_grad():
        for mod_name, mod in model.named_modules():
            for p_name, p in mod.named_parameters(recurse=False):
                if id(p) in seen:
                    continue
                seen.add(id(p))
                full = f"{mod_name}.{p_name}" if mod_name else p_name
                if p.numel() == 0 and p_name == "weight" and hasattr(mod, "cpu_linear"):
                    k = int(mod.input_size_per_partition)
                    eye = torch.eye(k, dtype=p.dtype, device=p.device)
                    named.append((full, mod.cpu_linear(eye, p, None).t()))
                else:
                    named.append((full, p))
        fingerprints = fingerprint_tensors(named)
    packed = {k: list(v) for k, v in (getattr(model, "packed_modules_mapping", None) or {}).items()}
    return fingerprints, packed


def copies_in_place(model: torch.nn.Module) -> bool:
    """Whether new weights may be copied straight into the tensors vLLM computes with (``load_in_place``):
    every layer is unquantized (a quantized one's post-load step would have to run again) and every parameter
    still holds its values (vLLM's CPU backend pre-packs linear weights for oneDNN and leaves an empty
    ``weight``: a copy into it is impossible, and the packed copy would go stale). Otherwise the engine reloads
    through vLLM's layer-wise ``reload_weights``, which re-runs each layer's post-load step."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    plain = (UnquantizedLinearMethod, UnquantizedEmbeddingMethod)
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if method is not None and not isinstance(method, plain):
            return False
    return all(p.numel() > 0 for p in model.parameters())


def load_in_place(model: torch.nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """The model's own ``load_weights`` (HF names mapped, q/k/v and gate/up written into their fused
    parameters) copying each tensor into the existing storage: CUDA graphs keep their pointers, and none of the
    layer-wise reload's per-layer re-materialisation runs (measured on a 24-layer model on CPU: 9 ms against
    79 ms per hand-off, all of it host time). A tied head shares the embedding's storage and is written with it.
    A tensor the stream lacks leaves its parameter as it was, as the layer-wise reload does: the freshness gate
    names it (raising here would leave the other ranks mid-stream in the hand-off's collectives)."""
    model.load_weights(weights)  # type: ignore[operator]


def refresh_tied_head(model: torch.nn.Module) -> bool:
    """Re-tie the LM head to the (reloaded) embedding and re-run its post-load step.

    vLLM's layer-wise reload installs new embedding parameters and re-processes only modules whose
    weights it loaded; a tied head keeps pointing at the OLD embedding (and on CPU at an old pre-packed
    GEMM weight). Measured on the tiny model without this: sampled-token log-prob gap ~21 nats.
    """
    config = getattr(model, "config", None)
    head = getattr(model, "lm_head", None)
    if not getattr(config, "tie_word_embeddings", False) or head is None or not hasattr(head, "tie_weights"):
        return False
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

    embeds = [
        m
        for m in model.modules()
        if isinstance(m, VocabParallelEmbedding) and not isinstance(m, ParallelLMHead)
    ]
    if len(embeds) != 1:
        raise RolloutError(
            f"tied LM head but {len(embeds)} input embeddings found; cannot re-tie after reload"
        )
    head.tie_weights(embeds[0])
    head.quant_method.process_weights_after_loading(head)
    return True
