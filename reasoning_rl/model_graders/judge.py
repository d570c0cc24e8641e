"""``judge``: a generative judge (an LLM asked for a verdict on the response against the reference), greedy
(temperature 0) with a token budget per request, on transformers' ``generate`` (CPU in CI, the GPU when there
is one) or vLLM (``engine: vllm``).

Sound like the rule graders: a reply the strict parser cannot read, or one cut off by ``max_new_tokens``, is
the judge's failure (``error``: masked, never a fake score); the pool's hard budget kills a judge that runs
over it (``error``). The response is quoted with its tags escaped (``judge_prompt``) and cut to
``max_response_chars`` (its end kept, marked in ``details``) so its length cannot drive the judge over budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graders.types import Grade, GradeContext
from reasoning_rl.model_graders import judge_prompt, models

ENGINES = ("hf", "vllm")
DEFAULTS: dict[str, Any] = {
    "path": None,
    "engine": "hf",
    "device": "auto",
    "max_new_tokens": 16,
    "max_response_chars": 8000,
    "gpu_memory_utilization": 0.3,  # vLLM only: its share of the device's memory (beside the policy's engine)
}


@dataclass(frozen=True)
class Reply:
    """The judge's text and whether it ended on its own (False: cut by ``max_new_tokens``)."""

    text: str
    finished: bool


class JudgeGrader(models.ModelGrader):
    """An LLM judge with the rule graders' contract; subclasses may replace ``generate`` (the CI's scripted
    judge does)."""

    name = "judge"
    version = "1.0.0"
    context_fields = ("prompt",)
    setup_options = frozenset({"path", "engine", "device", "gpu_memory_utilization"})
    selftest_file = "judge_selftest.jsonl"

    defaults = DEFAULTS

    def check_options(self, options: dict[str, Any]) -> None:
        opts = self.checked_options(options)
        if opts["engine"] not in ENGINES:
            raise ValueError(f"judge: option `engine` must be one of {ENGINES}, got {opts['engine']!r}")
        self.check_positive_ints(opts, ("max_new_tokens", "max_response_chars"))
        share = opts["gpu_memory_utilization"]
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise ValueError(f"judge: option `gpu_memory_utilization` must be in (0, 1], got {share!r}")

    def grade(self, response: str, ground_truth: Any, *, context: GradeContext, **options: Any) -> Grade:
        refused = Grade.refused_call(self.check_options, options, response)
        if refused is not None:
            return refused
        opts = {**DEFAULTS, **options}
        limit = opts["max_response_chars"]
        details: dict[str, Any] = {"judge": str(opts["path"])}
        if len(response) > limit:
            details["truncated_chars"] = len(response) - limit
            response = response[-limit:]
        prompt = judge_prompt.render(
            context.prompt or "", "" if ground_truth is None else str(ground_truth), response
        )
        try:
            (reply,) = self.generate([prompt], opts)
        except models.ModelError as exc:
            return Grade.error(f"model: {exc}", **details)
        details["reply"] = reply.text[:500]
        if not reply.finished:
            return Grade.error(
                f"judge_budget: the judge's reply hit max_new_tokens={opts['max_new_tokens']} without a verdict",
                **details,
            )
        verdict = judge_prompt.parse(reply.text)
        if verdict is None:
            return Grade.error(
                f"judge_unparseable: no verdict line in the judge's reply {reply.text[:80]!r}", **details
            )
        return (
            Grade.correct("judge: CORRECT", **details)
            if verdict
            else Grade.incorrect("judge: INCORRECT", **details)
        )

    def generate(self, prompts: list[str], options: dict[str, Any]) -> list[Reply]:
        """Greedy replies to user messages, on the configured engine; ModelError when the model is unusable."""
        if options["engine"] == "vllm":
            return _vllm_generate(prompts, options)
        return _hf_generate(prompts, options)


def _hf_generate(prompts: list[str], options: dict[str, Any]) -> list[Reply]:
    import torch

    device = models.device_for(options["device"])
    model, tokenizer = models.load("causal", options["path"], device)
    texts = [_chat(tokenizer, p) for p in prompts]
    tokenizer.padding_side = "left"
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    eos = (
        model.generation_config.eos_token_id
        if model.generation_config.eos_token_id is not None
        else tokenizer.eos_token_id
    )
    with torch.inference_mode():
        out = model.generate(
            **batch,
            do_sample=False,  # temperature 0
            max_new_tokens=options["max_new_tokens"],
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=eos,
        )
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    replies = []
    for row in out[:, batch["input_ids"].shape[1] :].tolist():
        finished = any(t in eos_ids for t in row)
        if finished:
            row = row[: next(i for i, t in enumerate(row) if t in eos_ids)]
        replies.append(Reply(tokenizer.decode(row, skip_special_tokens=True), finished))
    return replies


def _vllm_generate(prompts: list[str], options: dict[str, Any]) -> list[Reply]:
    from vllm import SamplingParams

    llm = models.load("vllm", options["path"], "auto", options["gpu_memory_utilization"])
    params = SamplingParams(temperature=0.0, max_tokens=options["max_new_tokens"])
    outputs = llm.chat([[{"role": "user", "content": p}] for p in prompts], params, use_tqdm=False)
    return [Reply(o.outputs[0].text, o.outputs[0].finish_reason == "stop") for o in outputs]


def _chat(tokenizer: Any, prompt: str) -> str:
    messages = [{"role": "user", "content": prompt}]
    if getattr(tokenizer, "chat_template", None):
        return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    return prompt
