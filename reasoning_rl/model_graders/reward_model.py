"""``reward_model``: a sequence-classification reward model (any Hugging Face checkpoint directory with a
one-output head) scores (prompt, response) as the model's chat template lays them out.

Its score goes through ``normalize`` into the Grade's [0, 1]: ``sigmoid`` (default; the logit squashed) or
``raw`` (the head's value as it is, clipped into [0, 1], for heads trained to output such a score; the logit
is kept in ``details``). The verdict is ``correct`` when that score reaches ``threshold``. Per-group z-scores
are the trainer's job (GRPO's group advantage), not a grader's: a grade sees one response. A response longer
than ``max_tokens`` is cut from the left (the end, where the answer is, stays) and marked, never an ``error``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from graders.types import Grade, GradeContext, Verdict
from reasoning_rl.model_graders import models

NORMALIZE = ("sigmoid", "raw")
DEFAULTS: dict[str, Any] = {
    "path": None,
    "device": "auto",
    "normalize": "sigmoid",
    "threshold": 0.5,
    "max_tokens": 2048,
    "batch_size": 16,
}


class RewardModelGrader(models.ModelGrader):
    """A neural reward beside the rule graders: same contract (tri-state, budget, cache, selftest)."""

    name = "reward_model"
    version = "1.0.0"
    context_fields = ("messages",)
    setup_options = frozenset({"path", "device", "batch_size"})
    selftest_file = "reward_model_selftest.jsonl"

    defaults = DEFAULTS

    def check_options(self, options: dict[str, Any]) -> None:
        opts = self.checked_options(options)
        if opts["normalize"] not in NORMALIZE:
            raise ValueError(
                f"reward_model: option `normalize` must be one of {NORMALIZE}, got {opts['normalize']!r}"
            )
        threshold = opts["threshold"]
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise ValueError(
                f"reward_model: option `threshold` must be a number in [0, 1], got {threshold!r}"
            )
        self.check_positive_ints(opts, ("max_tokens", "batch_size"))

    def grade(self, response: str, ground_truth: Any, *, context: GradeContext, **options: Any) -> Grade:
        refused = Grade.refused_call(self.check_options, options, response)
        if refused is not None:
            return refused
        opts = {**DEFAULTS, **options}
        try:
            (logit, cut), *_ = self.score([context.messages or ()], [response], **opts)
        except models.ModelError as exc:
            return Grade.error(f"model: {exc}")
        score = (
            1.0 / (1.0 + math.exp(-logit)) if opts["normalize"] == "sigmoid" else min(1.0, max(0.0, logit))
        )
        verdict: Verdict = "correct" if score >= opts["threshold"] else "incorrect"
        details: dict[str, Any] = {"logit": logit, "model": str(opts["path"])}
        if cut:
            details["truncated_tokens"] = cut
        return Grade(score, verdict, f"reward {score:.4f} (threshold {opts['threshold']:g})", details)

    def score(
        self, chats: Sequence[Sequence[dict[str, str]]], responses: Sequence[str], **options: Any
    ) -> list[tuple[float, int]]:
        """(logit, tokens cut) per (chat, response), ``batch_size`` at a time: the batched path (bench,
        offline scoring); ``grade`` is a batch of one. ModelError when the model cannot be used."""
        import torch

        opts = {**DEFAULTS, **options}
        device = models.device_for(opts["device"])
        model, tokenizer = models.load("reward", opts["path"], device)
        encoded = [
            _encode(tokenizer, chat, r, opts["max_tokens"]) for chat, r in zip(chats, responses, strict=True)
        ]
        out: list[tuple[float, int]] = []
        for start in range(0, len(encoded), opts["batch_size"]):
            chunk = encoded[start : start + opts["batch_size"]]
            batch = tokenizer.pad({"input_ids": [ids for ids, _ in chunk]}, return_tensors="pt")
            with torch.inference_mode():
                logits = model(
                    input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device)
                ).logits[:, 0]
            values = [float(v) for v in logits.float().cpu()]
            if not all(math.isfinite(v) for v in values):
                raise models.ModelError(f"reward model returned a non-finite score: {values}")
            out += [(v, cut) for v, (_, cut) in zip(values, chunk, strict=True)]
        return out


def _encode(
    tokenizer: Any, chat: Sequence[dict[str, str]], response: str, max_tokens: int
) -> tuple[list[int], int]:
    """The chat plus the response as the assistant's turn, templated and tokenised; the left end is cut past
    ``max_tokens``. Returns (ids, how many tokens were cut)."""
    messages = [*chat, {"role": "assistant", "content": response}]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:  # no template: prompt and response as plain text, the tokenizer's own special tokens
        ids = tokenizer("\n".join(m["content"] for m in messages))["input_ids"]
    cut = max(0, len(ids) - max_tokens)
    return list(ids[cut:]), cut
