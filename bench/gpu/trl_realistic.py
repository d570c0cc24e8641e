"""TRL 1.16 GRPOTrainer on issue 20's realistic workload (adapted from ``../shared/gpu/trl_bench.py``).

    python bench/gpu/trl_realistic.py MODEL_DIR GSM8K.jsonl PROMPTS GENS MAX_TOKENS STEPS     (MICRO=32)

Same workload as ours (``realistic.py``): the converted SmolLM2-135M-Instruct dir, the GSM8K rows as
conversational prompts (TRL applies the tokenizer's chat template), GENS completions per prompt, up to
MAX_TOKENS new tokens with EOS honoured, temperature 1.0, the math grader (lenient) as the reward function,
one optimizer step per generation round (micro-batch MICRO, gradient accumulation PROMPTS*GENS/MICRO), beta 0,
vLLM colocated at 0.3 of the GPU with sleep mode off (TRL's measured setting). Prints ``RESULT {json}``: median
step seconds and Σtokens/Σtime (first step excluded), real tokens per step (TRL's ``num_tokens``: prompt + completion, no padding),
response lengths, reward, peak memory.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch


def _num(v: object) -> bool:
    try:
        float(v)  # type: ignore[arg-type]
        return True
    except ValueError:
        return False


def step_timer(times: list[float], history: list[dict[str, float]], gpu: bool) -> Any:
    """A TrainerCallback that appends each step's wall time to ``times`` (printing ``STEP n s``) and each logged
    step's numeric logs to ``history`` (TRL's ``num_tokens`` is cumulative: ``step_tokens``)."""
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.t = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if gpu:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.t)
            print(f"STEP {state.global_step} {times[-1]:.3f}s", flush=True)

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kw: Any
        ) -> None:
            if logs is not None and "num_tokens" in logs:
                history.append(
                    {k: float(v) for k, v in logs.items() if isinstance(v, int | float | str) and _num(v)}
                )

    return Timer()


def step_tokens(history: list[dict[str, float]]) -> list[float]:
    """Each logged step's tokens (prompt + completion, no padding) from TRL's cumulative ``num_tokens``."""
    return [history[0]["num_tokens"]] + [
        b["num_tokens"] - a["num_tokens"] for a, b in zip(history, history[1:], strict=False)
    ]


def main() -> None:
    model_dir, data = sys.argv[1], sys.argv[2]
    prompts, gens, max_tokens, steps = (int(x) for x in sys.argv[3:7])
    from trl import GRPOConfig, GRPOTrainer

    import graders
    from datasets import Dataset

    rows = [json.loads(line) for line in Path(data).read_text(encoding="utf-8").splitlines() if line.strip()][
        : prompts * (steps + 1)
    ]
    ds = Dataset.from_dict(
        {
            "prompt": [r["prompt"] for r in rows],
            "ground_truth": [str(r["reward_model"]["ground_truth"]) for r in rows],
        }
    )

    def math_reward(completions: list[Any], ground_truth: list[str], **_: Any) -> list[float]:
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [
            graders.grade("math", t, g, mode="lenient").score
            for t, g in zip(texts, ground_truth, strict=True)
        ]

    gpu = torch.cuda.is_available()
    use_vllm = gpu and os.environ.get("USE_VLLM", "1") == "1"
    mb = int(os.environ.get("MICRO", "32"))
    cfg = GRPOConfig(
        output_dir="/tmp/trl_real/out",
        per_device_train_batch_size=mb,
        gradient_accumulation_steps=(prompts * gens) // mb,
        num_generations=gens,
        max_completion_length=max_tokens,
        use_vllm=use_vllm,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        vllm_enable_sleep_mode=False,
        bf16=gpu,
        use_cpu=not gpu,
        max_steps=steps,
        logging_steps=1,
        report_to=[],
        beta=0.0,
        learning_rate=float(os.environ.get("REAL_LR", 1e-6)),  # as realistic.py
        save_strategy="no",
        temperature=float(os.environ.get("REAL_TEMPERATURE", 1.0)),  # as realistic.py
        gradient_checkpointing=False,
        dataloader_num_workers=0,
        seed=0,
    )
    times: list[float] = []
    history: list[dict[str, float]] = []  # TRL's per-step logs (num_tokens is cumulative)
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    trainer = GRPOTrainer(
        model=model_dir,
        reward_funcs=math_reward,
        args=cfg,
        train_dataset=ds,
        callbacks=[step_timer(times, history, gpu)],
    )
    trainer.train()
    logs = history
    tokens = step_tokens(logs)
    warm = list(range(1, len(times))) if len(times) > 1 else [0]
    step_s = sorted(times[i] for i in warm)

    def med(xs: list[float]) -> float:
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2

    res = {
        "system": "trl",
        "trl": __import__("trl").__version__,
        "vllm": use_vllm,
        "prompts": prompts,
        "G": gens,
        "max_tokens": max_tokens,
        "micro": mb,
        "steps": [round(t, 3) for t in times],
        "real_tokens": [int(t) for t in tokens],
        "step_s_median": round(med(step_s), 3),
        "tokens_per_s": round(sum(tokens[i] for i in warm) / sum(times[i] for i in warm)),  # Σ/Σ
        "response_len_mean": [round(lg.get("completions/mean_length", float("nan")), 1) for lg in logs],
        "response_len_max": max(lg.get("completions/max_length", 0.0) for lg in logs),
        "clipped_ratio": [round(lg.get("completions/clipped_ratio", float("nan")), 4) for lg in logs],
        "reward_mean": [round(lg.get("reward", float("nan")), 4) for lg in logs],
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1) if gpu else None,
    }
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
