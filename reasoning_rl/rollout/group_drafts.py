"""The RL-aware draft source (``rollout.speculative.method=group``): earlier samples of the same prompt.

An RL batch samples each prompt n times and sees it again epochs later; a reasoning trace repeats its
siblings' phrasing, so the continuation of the context's last few tokens in an earlier sample of the SAME
prompt is a good cheap draft. Keyed by a digest of the prompt's token ids, so a prompt's drafts can only come
from its own earlier samples, never from another prompt. Memory is bounded: at most ``samples_per_prompt``
samples per prompt (oldest dropped) and ``max_prompts`` prompts (least recently used dropped). The target model
verifies every draft, so a bad one costs a rejected token, never a wrong one.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

_SEP = -1  # between samples in an entry's token buffer: no match or draft crosses it
_SCAN = 64  # most occurrences of the short n-gram compared per proposal (latest first)


def prompt_key(prompt: Sequence[int]) -> bytes:
    """The identity of a prompt: a digest of its token ids (16 bytes per prompt kept, whatever its length)."""
    return hashlib.blake2b(np.asarray(prompt, dtype=np.int64).tobytes(), digest_size=16).digest()


@dataclass
class _Entry:
    """One prompt's kept samples: concatenated with separators, and where each ``lookup_min``-gram ends."""

    samples: deque[tuple[int, ...]] = field(default_factory=deque)
    tokens: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)  # where each sample begins in ``tokens``
    ends: dict[tuple[int, ...], list[int]] = field(default_factory=dict)

    def add(self, sample: tuple[int, ...], n: int) -> None:
        start = len(self.tokens)
        self.starts.append(start)
        self.tokens.extend(sample)
        self.tokens.append(_SEP)
        for end in range(start + n, start + len(sample)):  # grams with at least one token after them
            self.ends.setdefault(tuple(self.tokens[end - n : end]), []).append(end)

    def rebuild(self, n: int) -> None:
        self.tokens, self.starts, self.ends = [], [], {}
        for sample in self.samples:
            self.add(sample, n)


class GroupDrafts:
    """Per prompt, the last ``samples_per_prompt`` responses; ``propose`` drafts the continuation of the
    longest suffix of the context (``lookup_min`` to ``lookup_max`` tokens) found in them (of equal matches the
    one with the longest continuation up to the draft length, then the one nearest the same response position,
    then the latest)."""

    def __init__(
        self, *, lookup_min: int, lookup_max: int, samples_per_prompt: int, max_prompts: int
    ) -> None:
        if not 1 <= lookup_min <= lookup_max:
            raise ValueError(f"need 1 <= lookup_min <= lookup_max, got {lookup_min}, {lookup_max}")
        if samples_per_prompt < 1 or max_prompts < 1:
            raise ValueError("samples_per_prompt and max_prompts must be >= 1")
        self.lookup_min, self.lookup_max = lookup_min, lookup_max
        self.samples_per_prompt, self.max_prompts = samples_per_prompt, max_prompts
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()

    def record(self, prompt: Sequence[int], response: Sequence[int]) -> None:
        """Keep a finished response of ``prompt`` as a draft source for its later samples."""
        if len(response) <= self.lookup_min:  # too short to match and still have a token to draft
            return
        key = prompt_key(prompt)
        entry = self._entries.pop(key, None) or _Entry()
        self._entries[key] = entry  # most recently used last
        entry.samples.append(tuple(int(t) for t in response))
        if len(entry.samples) > self.samples_per_prompt:
            entry.samples.popleft()
            entry.rebuild(self.lookup_min)
        else:
            entry.add(entry.samples[-1], self.lookup_min)
        while len(self._entries) > self.max_prompts:
            self._entries.popitem(last=False)

    def propose(self, prompt: Sequence[int], context: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` draft tokens after ``context`` (prompt + response so far) from this prompt's samples;
        [] when none matches."""
        n = self.lookup_min
        entry = self._entries.get(prompt_key(prompt))
        if entry is None or k < 1 or len(context) < n:
            return []
        ends = entry.ends.get(tuple(int(t) for t in context[-n:]))
        if not ends:
            return []
        tokens, best = entry.tokens, ends[-1]
        best_score: tuple[int, int, int] | None = None
        longest = min(self.lookup_max, len(context))
        at = len(context) - len(prompt)  # the response position being drafted
        for end in reversed(ends[-_SCAN:]):
            m = n
            while m < longest and end - m - 1 >= 0 and tokens[end - m - 1] == int(context[-m - 1]):
                m += 1
            piece = tokens[end : end + k]
            offset = end - entry.starts[bisect.bisect_right(entry.starts, end) - 1]
            # the longest match, then the longest draft, then the same position in its sample (a sibling that
            # went the same way); ties: the latest
            score = (m, piece.index(_SEP) if _SEP in piece else len(piece), -abs(offset - at))
            if best_score is None or score > best_score:
                best, best_score = end, score
            if score == (longest, k, 0):
                break
        draft = tokens[best : best + k]
        return draft[: draft.index(_SEP)] if _SEP in draft else draft

    def samples(self, prompt: Sequence[int]) -> int:
        """How many responses of ``prompt`` are kept."""
        entry = self._entries.get(prompt_key(prompt))
        return len(entry.samples) if entry is not None else 0

    def __len__(self) -> int:
        """Prompts kept."""
        return len(self._entries)
