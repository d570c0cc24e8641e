"""Issue 20: the floor of each stage of our step, measured alone on the machine, for both workloads.

    python bench/gpu/floors.py real --model DIR/FILE.gguf --data GSM8K.jsonl --out OUT.json [--micro 16384,32768,65536]
    python bench/gpu/floors.py anchor --shape qwen --out OUT.json

Builds the very components our ``Trainer`` builds from the workload's config (``realistic.real_config`` /
``side_by_side.anchor_config``: same engine, same policy, same prompts), then times each stage by itself:

- generation: the step's requests (the first batch's prompts x n, the engine's own ``SamplingParams``) through
  vLLM's engine loop directly, no grading, no trainer around it (twice; the faster counts), with each request's
  finish time, so the long tail shows (when 50 / 90 / 100 % of the samples were done, tokens left after 90 %);
  and once more as one ``LLM.generate`` call with ``n`` samples per prompt request (prefix shared);
- the update: ``Policy.train_step`` on that batch (the generated sequences), warm (median of 3 after a
  compile/warm-up step), at each micro-batch token budget asked for, with a torch-profiler table of one step;
- the hand-off: ``push_weights`` alone (median of 3), and with the freshness check as the step runs it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def rank0(parts: Any) -> tuple[Any, Any]:
    """The one in-process rank's own ``Policy`` and ``VLLMEngine`` (``parts.policy`` / ``parts.engine`` are the
    worker group's views; the floors time the objects themselves)."""
    worker = parts.group.backend.worker
    return worker.models.policy, worker.engine


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_generation(engine: Any, prompts: list[list[int]], sampling: Any) -> dict[str, Any]:
    """The requests through vLLM's engine loop (what ``LLM.generate`` runs), each finish time recorded."""
    from vllm.inputs import TokensPrompt

    llm_engine = engine.llm.llm_engine
    rid = 0
    for i, prompt in enumerate(prompts):
        for j in range(sampling.n):
            rid += 1
            llm_engine.add_request(
                f"f{time.time_ns()}-{rid}",
                TokensPrompt(prompt_token_ids=list(prompt)),
                engine._params(sampling, i, j),
            )
    t0 = time.perf_counter()
    done: list[tuple[float, list[int], list[int]]] = []
    steps = 0
    while llm_engine.has_unfinished_requests():
        steps += 1
        for out in llm_engine.step():
            if out.finished:
                done.append(
                    (time.perf_counter() - t0, list(out.prompt_token_ids), list(out.outputs[0].token_ids))
                )
    total = time.perf_counter() - t0
    times = sorted(d[0] for d in done)
    lens = [len(d[2]) for d in done]
    tokens = sum(lens)
    t90 = times[int(0.9 * len(times)) - 1]
    return {
        "seconds": round(total, 3),
        "samples": len(done),
        "engine_steps": steps,
        "response_tokens": tokens,
        "tokens_per_s": round(tokens / total),
        "response_len_mean": round(tokens / len(done), 1),
        "response_len_max": max(lens),
        "t50_s": round(times[len(times) // 2 - 1], 3),
        "t90_s": round(t90, 3),
        "t100_s": round(times[-1], 3),
        "tokens_after_t90": sum(len(d[2]) for d in done if d[0] > t90),
        "_seqs": [(d[1], d[2]) for d in done],
    }


def generate_grouped(engine: Any, prompts: list[list[int]], sampling: Any) -> dict[str, Any]:
    """One ``LLM.generate`` call, one request of n samples per prompt (vLLM shares the prompt's prefill)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    one = engine._params(sampling, 0, 0)
    params = SamplingParams(
        n=sampling.n,
        temperature=one.temperature,
        top_p=one.top_p,
        max_tokens=one.max_tokens,
        ignore_eos=one.ignore_eos,
        seed=None,
        detokenize=False,
    )
    sync()
    t0 = time.perf_counter()
    outs = engine.llm.generate(
        [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False
    )
    total = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
    return {"seconds": round(total, 3), "response_tokens": tokens, "tokens_per_s": round(tokens / total)}


def update_floor(
    policy: Any,
    seqs: list[tuple[list[int], list[int]]],
    algo: Any,
    max_tokens: int,
    micro_tokens: int,
    profile_to: Path | None,
    runs: int = 4,
) -> dict[str, Any]:
    from reasoning_rl.algorithms import compute_advantages
    from reasoning_rl.policy import TokenBatch

    batch = TokenBatch([torch.tensor(p + r) for p, r in seqs], [len(p) for p, _ in seqs])
    g = torch.Generator().manual_seed(7)
    adv = compute_advantages("grpo", torch.rand(len(seqs), generator=g), torch.arange(len(seqs)) // 8)
    policy.batching.token_budget = micro_tokens
    times = []
    for _ in range(runs):
        sync()
        t0 = time.perf_counter()
        m = policy.train_step(batch, adv, None, None, algo, max_response_len=max_tokens)
        sync()
        times.append(time.perf_counter() - t0)
    if profile_to is not None and torch.cuda.is_available():
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            policy.train_step(batch, adv, None, None, algo, max_response_len=max_tokens)
            sync()
        profile_to.write_text(
            prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=60)
        )
    return {
        "micro_batch_tokens": micro_tokens,
        "micro_batches": int(m["micro_batches"]),
        "first_s": round(times[0], 3),
        "seconds": round(statistics.median(times[1:]), 3),
        "all_s": [round(t, 3) for t in times],
        "real_tokens": batch.num_tokens,
        "padded_tokens": policy.batching.layout(batch).slots,  # positions computed, padding included
        "packed": bool(m["packed"]),
    }


def handoff_floor(parts: Any) -> dict[str, Any]:
    from reasoning_rl.handoff import push_weights

    plain, gated = [], []
    nbytes = 0
    policy, engine = rank0(parts)
    version = engine.version  # the run's last weights again: the engine keeps their version
    for _ in range(3):
        stats = push_weights(policy, engine, version=version)
        plain.append(stats.seconds)
        nbytes = stats.bytes
    for _ in range(3):
        t0 = time.perf_counter()
        parts.push_weights(version=version, trace=None)  # as the step runs it (wake + copy + freshness check)
        gated.append(time.perf_counter() - t0)
    return {
        "seconds": round(statistics.median(plain), 4),
        "bytes": nbytes,
        "gbps": round(nbytes / statistics.median(plain) / 1e9, 2),
        "with_check_s": round(statistics.median(gated), 4),
    }


def frontier_step(parts: Any, cfg: Any, prompts: list[Any], seed: int) -> Any:
    """``prompts`` generated and graded as the run's step does (one synchronous step of a frontier of its own
    over the run's engine): the step's ``Rollouts``."""
    import tempfile

    from reasoning_rl.data import PromptSampler
    from reasoning_rl.trace import TraceWriter
    from reasoning_rl.trainer.collect import RewardPlan
    from reasoning_rl.trainer.frontier import Frontier

    engine = parts.rollout_engine()
    frontier = Frontier(
        engine,
        parts.pool,
        prompts,
        RewardPlan(cfg.grading),
        PromptSampler(len(prompts), seed, shuffle=False),
        batch=len(prompts),
        max_lag=0,
        sampling=parts.sampling,
        seed_for_step=lambda _step: seed,
        tokenizer=parts.tokenizer,
        resident=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        trace = TraceWriter(Path(tmp) / "trace.jsonl")
        try:
            return frontier.next_batch(engine.version + 1, trace)[0]
        finally:
            frontier.close()
            trace.close("ok")


def replay_floors(parts: Any, cfg: Any, steps: list[int], gc_probe: bool = True) -> dict[str, Any]:
    """The run's own batches, each stage alone, in the run's process right after its last step (engine and
    compiled update as warm as the run left them), so each step's time has the floor of its own batch.

    Step k's prompts are rows (k-1)*B..k*B (``data.shuffle=false``). Per step: generation through vLLM's engine
    loop alone (twice, the faster counts), once through our ``collect`` (stream + grading pool, what the step
    runs) to split our loop's cost from the engine's, and the update on the generated sequences (median of 2
    after one more); once: with Python's GC off (does collection cost the engine loop time?), and the hand-off.
    """
    import gc

    size = cfg.trainer.batch_size
    policy, engine = rank0(parts)
    rows = []
    for k in steps:
        prompts = parts.train_prompts[(k - 1) * size : k * size]
        ids = [p.token_ids for p in prompts]
        sampling = parts.sampling(seed=k)
        raw = [timed_generation(engine, ids, sampling) for _ in range(2)]
        best = min(raw, key=lambda g: g["seconds"])
        seqs = best["_seqs"]
        for g in raw:
            g.pop("_seqs")
        t0 = time.perf_counter()
        ours = frontier_step(parts, cfg, prompts, seed=k)
        collect_s = time.perf_counter() - t0
        upd = update_floor(
            policy, seqs, cfg.algorithm, cfg.rollout.max_tokens, cfg.algorithm.micro_batch_tokens, None, 3
        )
        rows.append(
            {
                "step": k,
                "generation_runs_s": [g["seconds"] for g in raw],
                "generation_floor_s": best["seconds"],
                "generation": best,
                "collect_s": round(collect_s, 3),
                "collect_tokens": ours.tokens,
                "update_floor_s": upd["seconds"],
                "update": upd,
            }
        )
    probe = None
    if gc_probe and steps:
        prompts = parts.train_prompts[(steps[0] - 1) * size : steps[0] * size]
        gc.collect()
        gc.disable()
        try:
            probe = timed_generation(engine, [p.token_ids for p in prompts], parts.sampling(seed=steps[0]))
        finally:
            gc.enable()
        probe.pop("_seqs")
    handoff = handoff_floor(parts)
    for row in rows:
        row["floor_sum_s"] = round(row["generation_floor_s"] + row["update_floor_s"] + handoff["seconds"], 3)
    return {"steps": rows, "handoff": handoff, "generation_gc_off": probe}


def train_then_floors(
    cfg: Any, floor_steps: list[int]
) -> tuple[float, dict[str, Any], dict[str, Any] | None]:
    """``Trainer(cfg).run()`` as ``rrl train`` runs it; with ``floor_steps``, then ``replay_floors`` on the run's
    own components (kept open past ``run`` by wrapping the loop's ``build_components``). Returns the run's wall
    seconds, torch.compile's graph counters right after the run, and the floors (None without steps)."""
    from torch._dynamo.utils import counters

    import reasoning_rl.trainer.loop as loop

    kept: list[tuple[Any, Any]] = []
    build = loop.build_components

    def build_and_keep(*args: Any, **kwargs: Any) -> Any:
        parts = build(*args, **kwargs)
        kept.append((parts, parts.close))
        parts.close = lambda: None  # closed below, after the floors
        return parts

    if floor_steps:
        loop.build_components = build_and_keep
    try:
        t0 = time.time()
        loop.Trainer(cfg).run()
        wall = time.time() - t0
        graphs = dict(
            counters["stats"]
        )  # unique_graphs after step 1's compile: flat unless a step recompiled
        replay = replay_floors(kept[0][0], cfg, floor_steps) if kept else None
    finally:
        loop.build_components = build
        for _, close in kept:
            close()
    return wall, graphs, replay


def with_floor_ratios(out: dict[str, Any], replay: dict[str, Any]) -> None:
    """Each step's time over the floor sum of its own batch (``out["steps"]``: rows with ``step``/``step_s``)."""
    by_step = {int(r["step"]): r for r in out["steps"]}
    ratios = [
        by_step[f["step"]]["step_s"] / f["floor_sum_s"] for f in replay["steps"] if f["step"] in by_step
    ]
    sums = [f["floor_sum_s"] for f in replay["steps"]]
    out["floors"] = replay
    out["step_over_floor_sum"] = [round(x, 3) for x in ratios]
    out["step_over_floor_sum_median"] = round(statistics.median(ratios), 3) if ratios else None
    out["floor_sum_median_s"] = round(statistics.median(sums), 3) if sums else None


def measure(cfg: Any, out_dir: Path, micro: list[int], tag: str) -> dict[str, Any]:
    from rich.console import Console

    from reasoning_rl.trainer.build import build_components

    t_build = time.time()
    parts = build_components(cfg, cfg.run_dir, console=Console())
    build_s = time.time() - t_build
    try:
        prompts = [p.token_ids for p in parts.train_prompts[: cfg.trainer.batch_size]]
        sampling = parts.sampling(seed=1)
        policy, engine = rank0(parts)
        timed_generation(engine, prompts[:4], sampling)  # warm-up (first requests pay lazy set-up)
        gens = [timed_generation(engine, prompts, sampling) for _ in range(2)]
        grouped = generate_grouped(engine, prompts, sampling)
        best = min(gens, key=lambda g: g["seconds"])
        seqs = best.pop("_seqs")
        for g in gens:
            g.pop("_seqs", None)
        updates = [
            update_floor(
                policy,
                seqs,
                cfg.algorithm,
                cfg.rollout.max_tokens,
                m,
                out_dir / f"profile_update_{tag}.txt" if m == cfg.algorithm.micro_batch_tokens else None,
            )
            for m in micro
        ]
        handoff = handoff_floor(parts)
    finally:
        parts.close()
    ours_update = next(u for u in updates if u["micro_batch_tokens"] == cfg.algorithm.micro_batch_tokens)
    floor_sum = best["seconds"] + ours_update["seconds"] + handoff["seconds"]
    return {
        "workload": tag,
        "build_s": round(build_s, 1),
        "generation_runs": gens,
        "generation_floor_s": best["seconds"],
        "generation_grouped_n": grouped,
        "updates": updates,
        "update_floor_s": ours_update["seconds"],
        "handoff": handoff,
        "floor_sum_s": round(floor_sum, 3),
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)
        if torch.cuda.is_available()
        else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["real", "anchor"])
    ap.add_argument("--model", type=Path)
    ap.add_argument("--data", type=Path)
    ap.add_argument("--shape", default="qwen")
    ap.add_argument(
        "--micro", default="", help="comma-separated micro-batch token budgets (default: the config's)"
    )
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    on_gpu = torch.cuda.is_available()
    if args.workload == "real":
        from realistic import real_config

        if args.model is None or args.data is None:
            ap.error("real needs --model and --data")
        cfg = real_config(args.model, args.data, Path("/tmp/rrl_floor/real"), 1, on_gpu)
    else:
        from side_by_side import anchor_config

        cfg = anchor_config(args.shape, 1, Path("/tmp/rrl_floor"))
    micro = [int(x) for x in args.micro.split(",") if x] or [cfg.algorithm.micro_batch_tokens]
    if cfg.algorithm.micro_batch_tokens not in micro:
        micro.append(cfg.algorithm.micro_batch_tokens)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = measure(cfg, args.out.parent, micro, args.workload)
    args.out.write_text(json.dumps(result, indent=1))
    print("FLOORS " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
