"""Issue 45, TRL 1.16's GRPOTrainer at e2e45.py's shape and settings (the peer ours must beat by 2x).

    python bench/gpu/trl45.py --variant 1.5b-8k --ours $OUT/e2e45_1.5b-8k.json --out $OUT
    python bench/gpu/trl45.py --tiny --out DIR        # CPU check of the same code (skipped when trl is absent)

Check -> run -> table. Check: the same model dir and prompt rows as ours (``e2e45.prepare`` in the same
``--work``), TRL importable. Run: ``GRPOTrainer`` with vLLM colocated (sleep mode on through the update, as ours;
its share of the device ``--share``, default the one our plan gave, from ``--ours``), the same prompts x 8
samples, the same per-request lengths (``lengths.LengthControl``, EOS ignored), temperature 1.0, beta 0,
``vllm_importance_sampling_correction`` off (the work ours does), one optimizer step per generation round, the
rewards 0; micro-batch ``--micro`` sequences (default: the largest power of two whose sequences of the longest
length fit our plan's budget), gradient checkpointing as ours (off); the 7B variant with PEFT LoRA r=32, alpha 64,
all linear layers. Timers and token counts as ``trl_realistic.py`` (``step_timer``, ``step_tokens``), the first
step a warm-up. Writes ``$OUT/trl45_<variant>.json`` (``throughput.result``; with ``--ours`` both runs, so the
``ours / trl`` ratio of Σtokens/Σtime is in it and ``throughput.py`` recomputes it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import throughput  # noqa: E402
from e2e45 import GENS, VARIANTS, Variant, prepare  # noqa: E402
from lengths import LengthControl, describe, lognormal_lengths  # noqa: E402
from trl_realistic import step_timer, step_tokens  # noqa: E402


def default_micro(budget: int | None, longest: int, batch: int) -> int:
    """The largest power of two dividing ``batch`` whose ``longest``-token sequences fit ``budget`` (ours'
    planned micro-batch tokens); 1 without a budget."""
    micro = 1
    while budget is not None and batch % (micro * 2) == 0 and micro * 2 * longest <= budget:
        micro *= 2
    return micro


def run_trl(
    variant: Variant, model: Path, data: Path, prompts: int, steps: int, micro: int, share: float
) -> dict[str, Any]:
    """TRL's run; its steps, tokens and generated tokens per step (all, the warm-up included)."""
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from datasets import Dataset

    gpu = torch.cuda.is_available()
    rows = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    ds = Dataset.from_dict({"prompt": [r["question"] for r in rows]})

    def reward(completions: list[Any], **_: Any) -> list[float]:
        return [0.0] * len(completions)  # as ours: every row's advantage 0, the full pass still runs

    cfg = GRPOConfig(
        output_dir="/tmp/trl45/out",
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=prompts * GENS // micro,
        num_generations=GENS,
        max_completion_length=variant.cap,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=share,
        vllm_enable_sleep_mode=gpu,
        vllm_importance_sampling_correction=False,
        generation_kwargs={"ignore_eos": True},
        bf16=gpu,
        use_cpu=not gpu,
        max_steps=steps + 1,
        logging_steps=1,
        report_to=[],
        beta=0.0,
        learning_rate=1e-6,
        save_strategy="no",
        temperature=1.0,
        gradient_checkpointing=False,
        dataloader_num_workers=0,
        shuffle_dataset=False,
        seed=0,
    )
    peft: Any = None
    if variant.lora:
        from peft import LoraConfig

        peft = LoraConfig(r=32, lora_alpha=64, target_modules="all-linear", task_type="CAUSAL_LM")
    times: list[float] = []
    history: list[dict[str, float]] = []
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    trainer = GRPOTrainer(
        model=str(model),
        reward_funcs=reward,
        args=cfg,
        train_dataset=ds,
        peft_config=peft,
        callbacks=[step_timer(times, history, gpu)],
    )
    with LengthControl(lognormal_lengths(prompts * GENS, variant.cap), variant.cap) as control:
        trainer.train()
    tokens = step_tokens(history)
    gen = [h.get("completions/mean_length", float("nan")) * prompts * GENS for h in history]
    return {
        "steps_all": times,
        "tokens_all": tokens,
        "gen_tokens_all": gen,
        "requests_length_controlled": control.seen,
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1) if gpu else None,
        "trl": __import__("trl").__version__,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", choices=[v for v in VARIANTS if v != "tiny"], default="1.5b-8k")
    ap.add_argument("--tiny", action="store_true", help="the tiny shape on CPU (skipped when trl is absent)")
    ap.add_argument("--ours", type=Path, default=None, help="e2e45.py's JSON: its run, share and budget")
    ap.add_argument("--prompts", type=int, default=None, help="prompts per step (default: ours', else 64)")
    ap.add_argument(
        "--steps", type=int, default=None, help="measured steps (default: ours', else the variant's)"
    )
    ap.add_argument("--micro", type=int, default=None, help="sequences per micro-batch (default: see above)")
    ap.add_argument(
        "--share", type=float, default=None, help="vLLM's gpu_memory_utilization (default: ours')"
    )
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="where the JSON goes (default $OUT)")
    ap.add_argument(
        "--work", default=None, help="model and prompts, as e2e45.py's --work (default: a temp dir)"
    )
    args = ap.parse_args()
    name = "tiny" if args.tiny else args.variant
    if importlib.util.find_spec("trl") is None:
        print("trl is not installed: skipped (the GPU call installs TRL 1.16 from the carried wheels)")
        return
    v = VARIANTS[name]
    ours = json.loads(args.ours.read_text()) if args.ours else None
    prompts = args.prompts or (ours["workload"]["prompts"] if ours else v.prompts)
    steps = args.steps or (len(ours["runs"][0]["steps_s"]) if ours else v.steps)
    memory = ours["memory"] if ours else {}
    lines = memory.get("plan_lines") or []
    planned = [float(x.split("gpu_memory_utilization=")[1]) for x in lines if "gpu_memory_utilization=" in x]
    share = args.share or (planned[0] if planned else 0.3)
    micro = args.micro or default_micro(
        memory.get("plan_micro_batch_tokens"), v.prompt_len + v.cap, prompts * GENS
    )
    with tempfile.TemporaryDirectory() as tmp:
        model, data = prepare(v, Path(args.work or tmp), prompts, steps)
        got = run_trl(v, model, data, prompts, steps, micro, share)
    n = len(got["steps_all"])
    run = {
        "name": "trl",
        "steps_s": got["steps_all"][1:],
        "tokens": got["tokens_all"][1:n],
        "gen_tokens": got["gen_tokens_all"][1:n],
    }
    workload = {
        **(
            ours["workload"] if ours else {"name": f"issue45 {name}", "prompts": prompts, "max_tokens": v.cap}
        ),
        "lengths": describe(lognormal_lengths(prompts * GENS, v.cap), v.cap),
        "trl": {
            "micro_batch": micro,
            "vllm_share": share,
            "sleep": True,
            "is_correction": False,
            "peft": v.lora,
        },
    }
    runs = ([ours["runs"][0]] if ours else []) + [run]
    result = throughput.result(workload, runs, trl_raw=got)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"trl45_{name}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(throughput.table(result), flush=True)
    print(
        f"TRL peak {got['peak_gib']} GiB, micro-batch {micro}, vLLM share {share}; wrote {path}", flush=True
    )


if __name__ == "__main__":
    main()
