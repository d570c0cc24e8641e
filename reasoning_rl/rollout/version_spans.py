"""Per-token policy versions of whole-response requests, from spans recorded at each weight swap (issue 44).

A continuous request submitted with ``deltas=False`` reports nothing until it finishes, so no step's output
can carry its version. Instead, at every swap the engine notes how many output tokens each such resident
request has (what it has already reported to its own per-request state), and the version from then on: a
request's tokens ``[start_k, start_{k+1})`` were sampled by version ``v_k``. That is one entry per resident
request per swap, not one object per request per engine step, and it equals what per-step stamping records:
a token reported before the swap carries the old version, one reported after it the new one.
"""

from __future__ import annotations

from collections.abc import Iterable


class VersionSpans:
    """For each tracked request: ``[(start, version), ...]``, starts ascending, the first at 0."""

    def __init__(self) -> None:
        self._spans: dict[str, list[tuple[int, int]]] = {}

    def start(self, rid: str, version: int) -> None:
        """Track ``rid``, sampled by ``version`` from its first token."""
        self._spans[rid] = [(0, version)]

    def swap(self, counts: Iterable[tuple[str, int]], version: int) -> None:
        """New weights (``version``): each ``(rid, tokens it has now)``'s later tokens are of ``version``."""
        for rid, count in counts:
            spans = self._spans[rid]
            if spans[-1][0] == count:  # nothing sampled since the previous swap
                spans[-1] = (count, version)
            else:
                spans.append((count, version))

    def versions(self, rid: str, n: int) -> tuple[int, list[int] | None]:
        """The version of the last of ``rid``'s first ``n`` tokens, and each token's where they differ (None:
        all that one, ``Delta``'s convention)."""
        spans = self._spans[rid]
        inside = [s for s in spans if s[0] < n] or spans[:1]
        if len(inside) == 1:
            return inside[0][1], None
        ends = [s[0] for s in inside[1:]] + [n]
        out: list[int] = []
        for (begin, version), end in zip(inside, ends, strict=True):
            out += [version] * (end - begin)
        return inside[-1][1], out

    def forget(self, ids: Iterable[str]) -> None:
        for rid in ids:
            self._spans.pop(rid, None)

    def ids(self) -> list[str]:
        return list(self._spans)

    def __contains__(self, rid: object) -> bool:
        return rid in self._spans
