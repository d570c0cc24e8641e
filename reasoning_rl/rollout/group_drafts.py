"""The RL-aware draft source (``rollout.speculative.method=group``): earlier samples of the same prompt.

An RL batch samples each prompt n times and sees it again epochs later; a reasoning trace repeats its
siblings' phrasing, so the continuation of the context's last few tokens in an earlier sample of the SAME
prompt is a good cheap draft. Keyed by a digest of the prompt's token ids, so a prompt's drafts can only come
from its own earlier samples, never from another prompt. The target model verifies every draft, so a bad one
costs a rejected token, never a wrong one.

Memory is bounded in bytes (``max_bytes``: least recently used prompts dropped first) and in samples per prompt
(``samples_per_prompt``: oldest dropped). A prompt's samples are two compact arrays: its tokens (int32, each
sample followed by a separator) and, at each position, a 64-bit key of the ``lookup_min`` tokens before it
(12 bytes a kept token); a proposal scans the keys with numpy, and dropping the oldest sample cuts both arrays
at its end: nothing is recomputed.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

_SEP = -1  # after each sample in an entry's token array: no match or draft crosses it
_SCAN = 64  # most occurrences of the short n-gram compared per proposal (latest first)
_MUL = np.uint64(0x9E3779B97F4A7C15)  # the n-gram key's multiplier (wrapping uint64 arithmetic)
_NO_KEY = np.uint64(0)  # positions with no n-gram that has a token after it; real keys are odd
ENTRY_BYTES = 512  # a kept prompt's fixed cost: its digest, dict slot, entry object and array headers
TOKEN_BYTES = 12  # per kept token (and separator): the token (int32) and its n-gram key (uint64)


def prompt_key(prompt: Sequence[int]) -> bytes:
    """The identity of a prompt: a digest of its token ids (16 bytes per prompt kept, whatever its length)."""
    return hashlib.blake2b(np.asarray(prompt, dtype=np.int64).tobytes(), digest_size=16).digest()


def gram_keys(tokens: np.ndarray, n: int) -> np.ndarray:
    """The key of every ``n``-gram ``tokens[i : i + n]`` (odd, so never ``_NO_KEY``); equal grams, equal keys
    (different grams may collide: a match is confirmed on the tokens)."""
    a = np.asarray(tokens).astype(np.uint64)
    m = len(a) - n + 1
    keys = np.zeros(max(m, 0), dtype=np.uint64)
    for i in range(n):
        keys = keys * _MUL + a[i : i + m]
    return keys | np.uint64(1)


class _Entry:
    """One prompt's kept samples: ``tokens`` (each sample then ``_SEP``), ``keys[e]`` the key of the
    ``n``-gram ending before position ``e`` where a token of the same sample follows it, and each sample's start."""

    __slots__ = ("keys", "starts", "tokens")

    def __init__(self) -> None:
        self.tokens = np.empty(0, dtype=np.int32)
        self.keys = np.empty(0, dtype=np.uint64)
        self.starts: list[int] = []

    @property
    def nbytes(self) -> int:
        return ENTRY_BYTES + self.tokens.nbytes + self.keys.nbytes + 8 * len(self.starts)

    def add(self, sample: np.ndarray, n: int) -> None:
        size = len(sample)
        segment = np.empty(size + 1, dtype=np.int32)
        segment[:size], segment[size] = sample, _SEP
        keys = np.full(size + 1, _NO_KEY, dtype=np.uint64)
        keys[n:size] = gram_keys(sample[: size - 1], n)  # grams with at least one token after them
        self.starts.append(len(self.tokens))
        self.tokens = np.concatenate([self.tokens, segment])
        self.keys = np.concatenate([self.keys, keys])

    def drop_oldest(self) -> None:
        """Forget the oldest sample: both arrays cut at its end (copies, so its memory is released)."""
        cut = self.starts[1] if len(self.starts) > 1 else len(self.tokens)
        self.tokens, self.keys = self.tokens[cut:].copy(), self.keys[cut:].copy()
        self.starts = [s - cut for s in self.starts[1:]]


class GroupDrafts:
    """Per prompt, the last ``samples_per_prompt`` responses, all prompts together within ``max_bytes``;
    ``propose`` drafts the continuation of the longest suffix of the context (``lookup_min`` to ``lookup_max``
    tokens) found in them (of equal matches the one with the longest continuation up to the draft length, then
    the one nearest the same response position, then the latest)."""

    def __init__(self, *, lookup_min: int, lookup_max: int, samples_per_prompt: int, max_bytes: int) -> None:
        if not 1 <= lookup_min <= lookup_max:
            raise ValueError(f"need 1 <= lookup_min <= lookup_max, got {lookup_min}, {lookup_max}")
        if samples_per_prompt < 1:
            raise ValueError("samples_per_prompt must be >= 1")
        if max_bytes < ENTRY_BYTES:
            raise ValueError(f"max_bytes must be >= {ENTRY_BYTES} (one prompt's fixed cost)")
        self.lookup_min, self.lookup_max = lookup_min, lookup_max
        self.samples_per_prompt, self.max_bytes = samples_per_prompt, max_bytes
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._bytes = 0

    def record(self, prompt: Sequence[int], response: Sequence[int]) -> None:
        """Keep a finished response of ``prompt`` as a draft source for its later samples (not kept: one too
        short to draft from, or larger than ``max_bytes`` on its own)."""
        if len(response) <= self.lookup_min:  # too short to match and still have a token to draft
            return
        if ENTRY_BYTES + TOKEN_BYTES * (len(response) + 1) + 8 > self.max_bytes:
            return
        key = prompt_key(prompt)
        entry = self._entries.pop(key, None) or _Entry()
        self._entries[key] = entry  # most recently used last
        before = entry.nbytes if entry.starts else 0
        entry.add(np.asarray(response, dtype=np.int32), self.lookup_min)
        if len(entry.starts) > self.samples_per_prompt:
            entry.drop_oldest()
        self._bytes += entry.nbytes - before
        while self._bytes > self.max_bytes:
            oldest = next(iter(self._entries))
            if oldest == key:  # this prompt alone is over the bound: its own oldest samples go
                before = entry.nbytes
                entry.drop_oldest()
                self._bytes -= before - entry.nbytes
            else:
                self._bytes -= self._entries.pop(oldest).nbytes

    def propose(self, prompt: Sequence[int], context: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` draft tokens after ``context`` (prompt + response so far) from this prompt's samples;
        [] when none matches."""
        n = self.lookup_min
        entry = self._entries.get(prompt_key(prompt))
        if entry is None or k < 1 or len(context) < n:
            return []
        tail = [int(t) for t in context[-n:]]
        ends = np.flatnonzero(entry.keys == gram_keys(np.asarray(tail, dtype=np.int64), n)[0])
        tokens = entry.tokens
        best, best_score = -1, (0, 0, 0)
        longest = min(self.lookup_max, len(context))
        at = len(context) - len(prompt)  # the response position being drafted
        for end in reversed(ends[-_SCAN:].tolist()):
            window = tokens[max(end - longest, 0) : end + k].tolist()
            split = end - max(end - longest, 0)  # the window's position of ``end``
            if window[split - n : split] != tail:  # a key collision, not a match
                continue
            m = n
            while m < longest and split - m - 1 >= 0 and window[split - m - 1] == int(context[-m - 1]):
                m += 1
            piece = window[split:]
            offset = end - entry.starts[bisect.bisect_right(entry.starts, end) - 1]
            # the longest match, then the longest draft, then the same position in its sample (a sibling that
            # went the same way); ties: the latest
            score = (m, piece.index(_SEP) if _SEP in piece else len(piece), -abs(offset - at))
            if best < 0 or score > best_score:
                best, best_score = end, score
            if score == (longest, k, 0):
                break
        if best < 0:
            return []
        draft = tokens[best : best + k].tolist()
        return draft[: draft.index(_SEP)] if _SEP in draft else draft

    def samples(self, prompt: Sequence[int]) -> int:
        """How many responses of ``prompt`` are kept."""
        entry = self._entries.get(prompt_key(prompt))
        return len(entry.starts) if entry is not None else 0

    @property
    def nbytes(self) -> int:
        """What the kept samples take (``max_bytes`` at most)."""
        return self._bytes

    def __len__(self) -> int:
        """Prompts kept."""
        return len(self._entries)
