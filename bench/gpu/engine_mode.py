"""Host cost of a vLLM decode step per running request, in-process engine core vs vLLM's own engine process.

    python bench/gpu/engine_mode.py --shape qwen --out OUT.json          # on the GPU machine (kit installed)
    python bench/gpu/engine_mode.py --shape tiny --requests 16 --tokens 16 --out /tmp/em.json   # CPU dry run

Why (issues 42 and 44, 2026-12-07 H200 calls): generation on the kit's vLLM 0.24 ran at ~20 us per running
request per decode step on the anchor (Qwen2-0.5B shape, 256 x 256 tokens) and on the learning workload alike,
whatever the batch: the step is bound by the host, not the GPU. ``VLLMEngine`` runs the engine core in the
trainer's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, for the in-place weight hand-off), so scheduling, the
model runner's input preparation and output processing share one thread; vLLM's default puts the engine core in a
process of its own, beside output processing. This measures what that split is worth before anything is built on
it: each mode in its own process (the variable is read at import), the same requests (fixed length, ignore_eos,
sampling noise as the trainer draws it by default: one engine-wide stream on CUDA, a seed per request on CPU),
rounds alternating per-token log-probs off and on (continuous runs ask for them: decoupled PPO's behaviour
policy). ``mp2``: two engines on the one device, each in its own process with half the memory share and half the
requests: if the decode step is bound by one process's host time, two such processes should nearly halve a round
(the case for data-parallel engines per GPU). ``busy``: the in-process engine's rounds while ``update_probe.py``'s
train steps (``BUSY_UPDATE``, default compile:64) run in another process on the same device, as a split
placement's trainer would beside its engine; the update's steps alone and during the rounds come back under
``update`` (runs ``update:alone`` / ``update:during``): how much each slows the other says what overlapping the
update with generation (issue 44) can win. Σtokens/Σtime per mode and log-prob setting; raw rounds in ``runs``
(``throughput.result``'s format: steps_s = seconds per round, tokens = generated tokens per round).

``--prompts anchor``: instead of ``--requests`` distinct random prompts, round r decodes the anchor's batch r as the
anchor does (``--requests`` / 8 of TRL's bench prompt texts, tokenized by the model's tokenizer, 8 samples each as
requests of their own): the anchor's generation alternated 1.7 / 2.4 s from batch to batch on one H100
(2026-12-07 (5)) where this probe's distinct prompts took 1.2-1.5 s. ``--prefix-cache off``: vLLM's prefix
caching off (the 8 samples of a prompt share its blocks when it is on). Either suffixes the run names.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = ("inproc", "mp", "mp2", "busy")
ANCHOR_SAMPLES = 8  # the anchor's samples per prompt (side_by_side.GENS)
BUSY_ALONE_STEPS = 3  # the update's steps alone (after its compile step) before the engine's rounds start


def generate_split(
    llms: list[Any], prompts: list[Any], params: list[Any], tag: str, group: int = 1
) -> list[int]:
    """The requests dealt round-robin over ``llms`` (engine cores in their own processes, all running at once) in
    runs of ``group`` (one prompt's samples on one core, as ``rollout.engine_cores`` deals them), each engine
    stepped in turn until every request finished; the generated-token count per request."""
    done: dict[str, int] = {}
    for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
        llms[(i // group) % len(llms)].llm_engine.add_request(f"{tag}-{i}", prompt, p)
    while any(llm.llm_engine.has_unfinished_requests() for llm in llms):
        for llm in llms:
            if llm.llm_engine.has_unfinished_requests():
                for out in llm.llm_engine.step():
                    if out.finished:
                        done[out.request_id] = len(out.outputs[0].token_ids)
    return [done[f"{tag}-{i}"] for i in range(len(prompts))]


def child(args: argparse.Namespace) -> None:
    """The engine(s) of ``--mode`` in this process: a warm-up round, then ``--rounds`` rounds each of log-probs
    off and on, alternating; prints one JSON line. ``mp2``: two engines (each its own engine-core process, half
    the device's share and half the requests each) on the one device: whether data-parallel engines beat one
    engine whose decode step is bound by the host."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if args.mode in ("inproc", "busy") else "1"
    import random

    import torch
    from shapes import SHAPES, build_random_model, random_prompts
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    model = build_random_model(args.shape, Path(args.work) / f"model_{args.shape}")
    on_gpu = torch.cuda.is_available()
    kw: dict[str, Any] = {} if on_gpu else {"enforce_eager": True, "enable_chunked_prefill": False}
    count = 2 if args.mode == "mp2" else 1
    llms = [
        LLM(
            model=str(model),
            dtype="bfloat16" if on_gpu else "float32",
            gpu_memory_utilization=(0.3 if on_gpu else 0.2) / count,
            # the anchor's texts tokenize to ~1.5 tokens a word (~192 for 128 words)
            max_model_len=args.prompt * (2 if args.prompts == "anchor" else 1) + args.tokens + 8,
            max_num_seqs=args.requests,
            seed=k,
            enable_prefix_caching=args.prefix_cache == "on",
            **kw,
        )
        for k in range(count)
    ]
    llm = llms[0]
    # after the engine is built: vLLM sizes its KV cache from a memory profile that another process allocating or
    # freeing device memory (a compile) would disturb
    update = start_update(args) if args.mode == "busy" else None
    rng = random.Random(0)
    vocab = int(llm.llm_engine.model_config.get_vocab_size())
    distinct = [
        TokensPrompt(prompt_token_ids=[rng.randrange(3, vocab) for _ in range(args.prompt)])
        for _ in range(args.requests)
    ]

    # round r's requests: the distinct prompts, or the anchor's batch r (each prompt 8 times); round 0 = warm-up
    batches = [distinct] * (args.rounds + 1)
    if args.prompts == "anchor":
        per = args.requests // ANCHOR_SAMPLES
        texts = random_prompts(SHAPES[args.shape]["vocab_size"], per * (args.rounds + 1), args.prompt)
        ids = [llm.get_tokenizer()(t)["input_ids"] for t in texts]
        batches = [
            [
                TokensPrompt(prompt_token_ids=list(p))
                for p in ids[r * per : (r + 1) * per]
                for _ in range(ANCHOR_SAMPLES)
            ]
            for r in range(args.rounds + 1)
        ]

    def one_round(r: int, logprobs: bool) -> tuple[float, int]:
        prompts = batches[r]
        params = [
            SamplingParams(
                temperature=1.0,
                max_tokens=args.tokens,
                ignore_eos=True,
                seed=None if on_gpu else 1000 * r + i,  # as rollout.seed_per_sample's default on each device
                logprobs=0 if logprobs else None,
                detokenize=False,
            )
            for i in range(len(prompts))
        ]
        if on_gpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        if count == 1:
            outs = llm.generate(prompts, params, use_tqdm=False)
            lens = [len(o.outputs[0].token_ids) for o in outs]
        else:
            group = ANCHOR_SAMPLES if args.prompts == "anchor" else 1
            lens = generate_split(llms, prompts, params, f"r{r}{int(logprobs)}", group)
        dt = time.perf_counter() - t0
        return dt, sum(lens)

    one_round(0, True)  # warm-up (first-shape kernels, log-prob kernel JIT)
    rounds: dict[str, list[tuple[float, int]]] = {"off": [], "on": []}
    if update is not None:
        update.wait_steps(1 + BUSY_ALONE_STEPS)
    began = time.time()
    for r in range(1, args.rounds + 1):
        for lp in ("off", "on"):
            rounds[lp].append(one_round(r, lp == "on"))
    ended = time.time()
    extra: dict[str, Any] = {}
    if update is not None:
        extra = update.split(began, ended)
    print("RESULT " + json.dumps({"mode": args.mode, "rounds": rounds, **extra}), flush=True)


class Update:
    """``update_probe.py``'s train steps in a process of their own on the same device (a split placement's
    trainer beside its engine), each step's end time, seconds and tokens read from its ``STEP`` lines."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        import threading

        self.proc = proc
        self.steps: list[tuple[float, float]] = []
        self.tokens = 0.0  # per step (update_probe's fixed batch)
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("STEP "):
                _, end, dt, tokens = line.split()
                with self.cond:
                    self.steps.append((float(end), float(dt)))
                    self.tokens = float(tokens)
                    self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_steps(self, n: int) -> None:
        with self.cond:
            while len(self.steps) < n and self.proc.poll() is None:
                self.cond.wait(1.0)
        if len(self.steps) < n:
            raise SystemExit(
                f"the update process ended after {len(self.steps)} steps (rc {self.proc.poll()})"
            )

    def split(self, began: float, ended: float) -> dict[str, Any]:
        """Every step as (start, seconds) relative to the rounds' start (``rounds_s`` long), the compile step
        first; ``update:alone`` = the steps after it that ended before the rounds, ``update:during`` = those
        wholly inside them."""
        self.proc.terminate()
        with self.cond:
            steps = list(self.steps)
        return {
            "update_steps": [[round(end - dt - began, 3), dt] for end, dt in steps],
            "rounds_s": round(ended - began, 3),
            "update_tokens": self.tokens,
            "update_alone_s": [dt for end, dt in steps[1:] if end <= began],
            "update_during_s": [dt for end, dt in steps if end - dt >= began and end <= ended],
        }


def start_update(args: argparse.Namespace) -> Update:
    """The update beside the engine: ``BUSY_UPDATE`` (default compile:64) micro-batching, many steps."""
    script = Path(__file__).resolve().parent / "update_probe.py"
    env = dict(os.environ, UPDATE_LOG="1", UPDATE_PROFILE="0", UPDATE_STEPS="400")
    setting = os.environ.get("BUSY_UPDATE", "compile:64")
    cmd = [
        sys.executable,
        str(script),
        args.update_shape or args.shape,
        str(Path(args.work) / "busy"),
        setting,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    return Update(proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen")
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/tmp/rrl_em")
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompts", choices=("random", "anchor"), default="random")
    ap.add_argument("--prefix-cache", choices=("on", "off"), default="on")
    ap.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # the child's engine mode
    ap.add_argument("--timeout", type=float, default=200.0, help="seconds per mode's process")
    ap.add_argument("--modes", default=",".join(MODES), help="which of " + ", ".join(MODES))
    ap.add_argument(
        "--update-shape", default="", help="busy mode: the update's model shape (default --shape)"
    )
    args = ap.parse_args()
    if args.mode:
        child(args)
        return
    from throughput import result, summarise, table

    runs: list[dict[str, Any]] = []
    update_runs: list[dict[str, Any]] = []  # busy mode's train steps (its own sides: tokens of another kind)
    busy: dict[str, Any] = {}
    failed: dict[str, str] = {}
    suffix = (":anchor" if args.prompts == "anchor" else "") + (
        ":nocache" if args.prefix_cache == "off" else ""
    )
    for mode in args.modes.split(","):
        cmd = [sys.executable, __file__, *sys.argv[1:], "--mode", mode]
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            failed[mode] = f"timed out after {args.timeout:.0f} s"
            continue
        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            failed[mode] = (p.stderr or p.stdout)[-2000:]
            continue
        got = json.loads(line[len("RESULT ") :])
        print(f"MODE {mode}: {time.time() - t0:.0f} s in its process", flush=True)
        for lp, rs in got["rounds"].items():
            runs.append(
                {
                    "name": f"{mode}{suffix}:logprobs-{lp}",
                    "steps_s": [round(dt, 4) for dt, _ in rs],
                    "tokens": [n for _, n in rs],
                }
            )
        if mode == "busy":  # the update's steps alone and beside generation: sides of their own
            busy = {k: got.get(k) for k in ("update_steps", "rounds_s", "update_tokens")}
            for key in ("update_alone_s", "update_during_s"):
                steps = [round(dt, 4) for dt in got.get(key, [])]
                if steps:
                    update_runs.append(
                        {
                            "name": f"update:{key.split('_')[1]}",
                            "steps_s": steps,
                            "tokens": [got["update_tokens"]] * len(steps),
                        }
                    )
    workload = {
        "shape": args.shape,
        "requests": args.requests,
        "prompt_tokens": args.prompt,
        "prompts": args.prompts,  # anchor: the anchor's batches (per round), 8 requests per prompt
        "prefix_cache": args.prefix_cache,
        "max_tokens": args.tokens,
        "ignore_eos": True,
        "tokens": "generated tokens per round (prompt tokens not counted)",
    }
    out = result(workload, runs)
    out["failed"] = failed
    if update_runs:
        out["update"] = {**summarise(update_runs), "runs": update_runs, **busy}
        print(table(out["update"]))
    for r in runs:
        steps = args.tokens  # fixed length: one decode step per generated token of each request
        r["us_per_request_step"] = round(
            1e6 * sum(r["steps_s"]) / (len(r["steps_s"]) * steps * args.requests), 2
        )
        print(f"{r['name']:>22}: {r['us_per_request_step']} us per request-step, rounds {r['steps_s']}")
    print(table(out))
    if failed:
        print("FAILED " + json.dumps(failed)[:3000])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
