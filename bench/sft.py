"""SFT step throughput on CPU: ``rrl sft``'s step (``policy.sft.sft_step`` on the trainer's token batches) vs TRL's
``SFTTrainer`` at the same shape.

Workload: a random-init Qwen2 (hidden 256, 4 layers, 8 heads, 2 KV heads; ``reasoning_rl.tiny``), float32,
64 pre-tokenized rows of 64 prompt + 192 response tokens (loss on the response only), 8 rows per optimizer step
in one micro-batch (no packing, no gradient accumulation), AdamW lr 1e-4, grad-norm clip 1.0, 2 threads.
Each side runs in its own fresh process: one warm-up step, then ``STEPS`` timed optimizer steps; the sides
alternate over ``ROUNDS`` rounds (the machine is shared; its load moves) and the median is reported, as
all tokens (prompt + response) per second of wall time and per CPU-second (process time).

TRL is not a dependency: give its interpreter with ``--trl-python`` (a throwaway venv holding trl), else the
current one is used when it can import trl, else the peer is skipped with the reason printed.

    .venv/bin/python bench/sft.py [--trl-python /tmp/trlvenv/bin/python]

Prints a table; writes bench/out/sft.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "sft.json"
ROWS, PROMPT, RESPONSE, BATCH, STEPS, ROUNDS, THREADS = 64, 64, 192, 8, 6, 3, 2


def rows(vocab: int) -> list[tuple[list[int], list[int]]]:
    import random

    rng = random.Random(0)
    return [
        ([rng.randrange(7, vocab) for _ in range(PROMPT + RESPONSE)], [0] * PROMPT + [1] * RESPONSE)
        for _ in range(ROWS)
    ]


def ours(model_dir: str) -> dict[str, float]:
    import torch

    sys.path.insert(0, str(REPO))
    from reasoning_rl.data.sft import SftExample
    from reasoning_rl.policy import Policy
    from reasoning_rl.policy.sft import sft_step
    from reasoning_rl.trainer.sft_data import loss_tokens, token_batch

    torch.set_num_threads(THREADS)
    policy = Policy.from_pretrained(
        model_dir, lr=1e-4, grad_clip=1.0, micro_batch_tokens=BATCH * (PROMPT + RESPONSE), packing="off"
    )
    data = [SftExample(ids, mask, "bench") for ids, mask in rows(policy.lm.config.vocab_size)]
    wall = cpu = 0.0
    for step in range(STEPS + 1):
        chunk = data[(step * BATCH) % ROWS :][:BATCH]
        w0, c0 = time.perf_counter(), time.process_time()
        sft_step(policy, token_batch(chunk, 0), float(loss_tokens(chunk)))
        if step > 0:  # the first step is the warm-up
            wall += time.perf_counter() - w0
            cpu += time.process_time() - c0
    tokens = STEPS * BATCH * (PROMPT + RESPONSE)
    return {"tokens_per_s": tokens / wall, "tokens_per_cpu_s": tokens / cpu}


def trl(model_dir: str) -> dict[str, float]:
    import importlib

    import torch
    import trl as trl_pkg
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    datasets: Any = importlib.import_module(
        "datasets"
    )  # the repo's datasets/ folder would shadow it for linters
    torch.set_num_threads(THREADS)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    data = rows(model.config.vocab_size)
    ds = datasets.Dataset.from_list([{"input_ids": i, "completion_mask": m} for i, m in data])

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.wall = self.cpu = 0.0
            self.steps = 0

        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            self.w0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            if self.steps > 0:
                self.wall += time.perf_counter() - self.w0
                self.cpu += time.process_time() - self.c0
            self.steps += 1

    clock = Clock()
    with tempfile.TemporaryDirectory() as out:
        args = trl_pkg.SFTConfig(
            output_dir=out,
            per_device_train_batch_size=BATCH,
            gradient_accumulation_steps=1,
            max_steps=STEPS + 1,
            learning_rate=1e-4,
            max_grad_norm=1.0,
            lr_scheduler_type="constant",
            completion_only_loss=True,
            packing=False,
            max_length=PROMPT + RESPONSE,
            logging_steps=1000,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            dataloader_num_workers=0,
            seed=0,
        )
        trainer = trl_pkg.SFTTrainer(
            model=model, args=args, train_dataset=ds, processing_class=tok, callbacks=[clock]
        )
        trainer.train()
    tokens = STEPS * BATCH * (PROMPT + RESPONSE)
    return {
        "tokens_per_s": tokens / clock.wall,
        "tokens_per_cpu_s": tokens / clock.cpu,
        "trl": trl_pkg.__version__,
    }


def side(python: str, name: str, model_dir: str) -> dict[str, Any]:
    proc = subprocess.run(
        [python, __file__, "--side", name, "--model", model_dir], capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{name} side failed: {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def trl_python(given: str | None) -> tuple[str | None, str]:
    candidate = given or sys.executable
    probe = subprocess.run([candidate, "-c", "import trl"], capture_output=True, text=True)
    if probe.returncode == 0:
        return candidate, ""
    return None, f"trl is not importable by {candidate} (pip show trl: not installed); pass --trl-python"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--side", choices=["ours", "trl"])
    parser.add_argument("--model")
    parser.add_argument("--trl-python")
    a = parser.parse_args()
    if a.side is not None:
        print(json.dumps((ours if a.side == "ours" else trl)(a.model)))
        return
    sys.path.insert(0, str(REPO))
    from reasoning_rl.tiny import build_tiny_model

    peer, why = trl_python(a.trl_python)
    if peer is None:
        print(f"peer skipped: {why}")
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "trl": []}
    with tempfile.TemporaryDirectory() as tmp:
        model = str(
            build_tiny_model(Path(tmp) / "m", hidden_size=256, num_layers=4, num_heads=8, num_kv_heads=2)
        )
        for _ in range(ROUNDS):
            runs["ours"].append(side(sys.executable, "ours", model))
            if peer is not None:
                runs["trl"].append(side(peer, "trl", model))
    result: dict[str, Any] = {
        "shape": {
            "rows_per_step": BATCH,
            "prompt": PROMPT,
            "response": RESPONSE,
            "steps": STEPS,
            "rounds": ROUNDS,
        },
        "peer_skipped": why or None,
    }
    print(f"{'side':6} {'tokens/s (median)':>18} {'tokens/CPU-s (median)':>22}  rounds")
    for name, got in runs.items():
        if not got:
            continue
        med = {k: statistics.median(r[k] for r in got) for k in ("tokens_per_s", "tokens_per_cpu_s")}
        result[name] = {**med, "rounds": got}
        print(
            f"{name:6} {med['tokens_per_s']:18.0f} {med['tokens_per_cpu_s']:22.0f}  {[round(r['tokens_per_s']) for r in got]}"
        )
    if runs["trl"]:
        ratio = result["ours"]["tokens_per_s"] / result["trl"]["tokens_per_s"]
        result["ratio_wall"] = ratio
        result["ratio_cpu"] = result["ours"]["tokens_per_cpu_s"] / result["trl"]["tokens_per_cpu_s"]
        print(f"ours / TRL: {ratio:.2f}x wall, {result['ratio_cpu']:.2f}x CPU")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
