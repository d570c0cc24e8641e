"""The weight hand-off's one way of cutting a stream of named tensors into buckets: the policy's gathered buckets
(``Policy.iter_full_params``) and the buffers an engine process maps (``vllm_transfer``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from torch import Tensor


def buckets(
    named: Iterable[tuple[str, Tensor]], bucket_bytes: int | None
) -> Iterator[list[tuple[str, Tensor]]]:
    """``named`` tensors grouped into lists of at most ``bucket_bytes`` (one tensor may exceed it); None: one list."""
    bucket: list[tuple[str, Tensor]] = []
    size = 0
    for name, tensor in named:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and bucket_bytes is not None and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket
