"""Sum the stack samples of ``bench/gpu/stacks_site`` (``stacks_<pid>.json``): where a thread's time goes.

    python bench/gpu/stacks_report.py DIR_OR_FILES... [--thread MainThread] [--within vllm_engine.py:advance]
        [--argv rrl] [--top 40]

Per process (its argv) and thread: samples in all, then, over the samples whose stack holds ``--within`` (a
``file:function`` frame or part of one; default: all), the frames that hold the most of them (inclusive: the
frame is anywhere on the stack) and the innermost frames (self: where the thread was when sampled). Shares are
of the ``--within`` samples.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def load(paths: list[str]) -> list[dict]:
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.glob("stacks_*.json")) if p.is_dir() else [p])
    return [dict(json.loads(f.read_text()), file=str(f)) for f in files]


def summarize(stacks: dict[str, int], within: str, top: int) -> list[str]:
    """Lines: the inclusive and self frames of the stacks that hold ``within``."""
    chosen = {s: n for s, n in stacks.items() if within in s}
    total = sum(chosen.values())
    if not total:
        return [f"  no sample holds {within!r}"]
    incl: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for s, n in chosen.items():
        frames = s.split(";")
        for f in set(frames):
            incl[f] += n
        own[frames[-1]] += n
    lines = [f"  {total} samples hold {within!r}", "  inclusive:"]
    lines += [f"    {n / total:6.1%}  {f}" for f, n in incl.most_common(top)]
    lines += ["  self (innermost):"]
    lines += [f"    {n / total:6.1%}  {f}" for f, n in own.most_common(top)]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--thread", default="MainThread")
    ap.add_argument("--within", default="")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--argv", default="", help="only processes whose command line holds this")
    ap.add_argument("--min-samples", type=int, default=200, help="skip threads with fewer samples")
    args = ap.parse_args()
    for rec in load(args.paths):
        threads = rec["threads"]
        if (
            args.argv not in " ".join(rec["argv"])
            or sum(threads.get(args.thread, {}).values()) < args.min_samples
        ):
            continue
        print(f"{rec['file']}: {' '.join(rec['argv'])[:160]} ({rec['wall_s']:.0f} s)")
        print("  threads: " + ", ".join(f"{k} {sum(v.values())}" for k, v in threads.items()))
        if args.thread in threads:
            print("\n".join(summarize(threads[args.thread], args.within, args.top)))


if __name__ == "__main__":
    main()
