"""vLLM rollout engine, colocated with the trainer in the same process.

The engine core runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so ``load_weights`` can hand
vLLM a lazy iterator of gathered tensors without pickling or a second full copy of the model.

Under torchrun (world size > 1) vLLM builds its groups from the existing default process group, and
group creation is collective: create the engine on EVERY rank at the same point (one engine per
rank, data-parallel rollout). An engine on rank 0 alone hangs there (measured on CPU/gloo).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from reasoning_rl.config import SpeculativeConfig
from reasoning_rl.rollout.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from reasoning_rl.rollout.base import (
    Completion,
    Delta,
    DraftCounts,
    Request,
    RolloutError,
    SamplingConfig,
    check_prompts,
    register_engine,
)
from reasoning_rl.rollout.fingerprints import EngineWeights, Fingerprint, fingerprint_tensors
from reasoning_rl.rollout.group_drafts import GroupDrafts
from reasoning_rl.rollout.vllm_drafter import (
    DraftTally,
    attach,
    cpu_rejection_sampler_compat,
    group_drafts,
    speculative_config,
)


def startup_memory_refusal(exc: ValueError, share: float, on_gpu: bool) -> str | None:
    """vLLM's refusal to start for lack of free memory (it wants ``share`` of the device, or of the host's RAM
    on CPU, free at start) as one line in our terms; None for any other error."""
    text = str(exc)
    if "on startup is less than" not in text:
        return None
    where = "GPU memory" if on_gpu else "RAM (vLLM's CPU backend reserves that share of it for its KV cache)"
    return (
        f"the vLLM engine cannot start: it needs {share:.0%} of the {where} free and less is free now "
        f"({text.split(' on startup')[0]}); stop the other heavy process (another training run or vLLM "
        "engine?) or lower rollout.gpu_memory_utilization"
    )


class VLLMEngine:
    """``RolloutEngine`` on ``vllm.LLM``. Log-probs are vLLM's ``raw_logprobs`` (before temperature/top-p).

    ``speculative`` (``rollout.speculative``, method not off): vLLM's speculative decoding with that drafter,
    each completion (and each request's finishing delta) carrying its draft counts; with ``group`` every
    finished whole sample (streamed, or a continuous request with ``deltas=False``: the synchronous step) is
    recorded as a draft source for its prompt's later samples (``drafts``)."""

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        seed: int = 0,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int = 1024,
        enable_sleep_mode: bool | None = None,
        speculative: SpeculativeConfig | None = None,
        **kw: Any,
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0":
            raise RolloutError(
                "VLLMEngine needs VLLM_ENABLE_V1_MULTIPROCESSING=0 (in-process engine) for the weight hand-off"
            )
        from vllm import LLM

        on_gpu = torch.cuda.is_available()
        self.sleep_enabled = on_gpu if enable_sleep_mode is None else enable_sleep_mode
        if self.sleep_enabled and not on_gpu:
            raise RolloutError(
                "enable_sleep_mode=True needs a CUDA device; vLLM's CPU backend has no sleep mode"
            )
        if not on_gpu:
            dtype = "float32" if dtype == "auto" else dtype
            kw.setdefault("enforce_eager", True)
            # A prompt split over two steps (chunked prefill: more prompt tokens than max_num_batched_tokens)
            # makes vLLM rewind that request's sampling generator, which CPU generators cannot do: every
            # seeded batch with > 4096 prompt tokens died with "CPU Generator does not use offset".
            kw.setdefault("enable_chunked_prefill", False)
        self.max_model_len = max_model_len
        self._asleep = False
        self._counter = 0
        self._live: set[str] = set()  # continuous requests (``submit``): resident across streams and updates
        self._whole: set[str] = set()  # those whose one output holds the whole response (deltas=False)
        self._held: list[Any] = []  # their outputs from steps a stream or score() took, for ``advance``
        self._lora: Any = None  # the LoRARequest of the live adapter (split placement's adapter hand-off)
        self._lora_dir: str | None = None
        if speculative is not None and speculative.on:
            kw.update(speculative_config=speculative_config(speculative))
            if not on_gpu:
                cpu_rejection_sampler_compat()
        try:
            self.llm = LLM(
                model=model_path,
                dtype=dtype,  # type: ignore[arg-type]
                seed=seed,
                gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len,
                enable_sleep_mode=self.sleep_enabled,
                logprobs_mode="raw_logprobs",
                **kw,
            )
        except ValueError as exc:
            refused = startup_memory_refusal(exc, gpu_memory_utilization, on_gpu)
            if refused is None:
                raise
            raise RolloutError(refused) from exc
        self.tokenizer = self.llm.get_tokenizer()
        self._tally: DraftTally | None = None  # rollout.speculative: each request's draft counts
        self._internal: dict[str, str] = {}  # our request id -> vLLM's internal one (the tally's key)
        if speculative is not None and speculative.on:
            scheduler = self._scheduler()
            if scheduler is None:
                raise RolloutError("rollout.speculative needs vLLM's in-process scheduler to count drafts")
            self._tally = DraftTally(scheduler)
        self.drafts: GroupDrafts | None = None
        if speculative is not None and speculative.method == "group":
            self.drafts = group_drafts(speculative)
            self.llm.collective_rpc(attach, args=(self.drafts,))

    def _params(self, sampling: SamplingConfig, seed: int | None, *, delta: bool = False) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(
            n=1,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            stop=list(sampling.stop) or None,
            seed=seed,
            logprobs=0 if sampling.logprobs else None,
            ignore_eos=sampling.ignore_eos,
            # Only finished requests come back (the default re-sends every request's cumulative tokens and
            # log-probs each step), and text is decoded once at the end unless stop strings need it live.
            # (continuous requests: each step's new tokens, which carry the policy version of that step)
            output_kind=RequestOutputKind.DELTA if delta else RequestOutputKind.FINAL_ONLY,
            detokenize=bool(sampling.stop),
        )

    def stream(self, prompts: list[list[int]], sampling: SamplingConfig) -> Iterator[Completion]:
        """One vLLM request per (prompt, sample) so each sample is yielded the step it finishes.

        With ``sampling.seed`` set, sample j of every prompt uses seed + j (reproducible per sample);
        ``sampling.prompt_seeds`` gives each prompt its own base seed instead.
        """
        if self._asleep:
            raise RolloutError("the vLLM engine is asleep; call wake() before generating")
        check_prompts(prompts, self.max_model_len)
        from vllm.inputs import TokensPrompt

        engine = self.llm.llm_engine
        if engine.get_num_unfinished_requests() > len(self._live):
            raise RolloutError("the vLLM engine already has requests in flight; one stream at a time")
        where: dict[str, tuple[int, int]] = {}
        for i, prompt in enumerate(prompts):
            for j in range(sampling.n):
                self._counter += 1
                rid = f"rrl-{self._counter}"
                self._add(
                    rid,
                    TokensPrompt(prompt_token_ids=list(prompt)),
                    self._params(sampling, sampling.seed_for(i, j)),
                )
                where[rid] = (i, j)
        pending = set(where)
        try:
            while pending:
                for out in self._step():
                    if not out.finished:
                        continue
                    pending.discard(out.request_id)
                    i, j = where[out.request_id]
                    done = _to_completion(
                        out, i, j, list(prompts[i]), self.tokenizer, self._drafts(out.request_id)
                    )
                    if self.drafts is not None:
                        self.drafts.record(done.prompt_ids, done.token_ids)
                    yield done
        finally:
            if pending:  # the consumer stopped early: do not leave requests running in the engine
                engine.abort_request(list(pending))
                self._forget(pending)

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        done = list(self.stream(prompts, sampling))
        return sorted(done, key=lambda c: (c.prompt_index, c.sample_index))

    def score(self, sequences: list[list[int]], prompt_lens: list[int]) -> list[list[float]]:
        """Log-probs of fixed tokens ``seq[prompt_len:]`` under the engine's weights (prompt log-probs).

        Used to compare the engine with the trainer on identical sequences, e.g. after a hand-off.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        check_prompts(sequences, self.max_model_len)
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        prompts = [TokensPrompt(prompt_token_ids=list(s)) for s in sequences]
        # LLM.generate steps until the engine is empty: with resident continuous requests, score alone
        outs = self._score_beside_live(prompts, params) if self._live else None
        if outs is None:
            outs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=self._lora)
        result = []
        for seq, p, out in zip(sequences, prompt_lens, outs, strict=True):
            steps = out.prompt_logprobs or []
            row = []
            for k in range(p, len(seq)):
                step = steps[k]
                if step is None:
                    raise RolloutError(f"vLLM returned no prompt log-prob at position {k}")
                row.append(float(step[seq[k]].logprob))
            result.append(row)
        return result

    def _score_beside_live(self, prompts: list[Any], params: Any) -> list[Any]:
        """Score requests stepped next to the resident continuous ones (whose outputs are held for ``advance``),
        so a check after a hand-off neither finishes nor loses them."""
        engine = self.llm.llm_engine
        ids = []
        for prompt in prompts:
            self._counter += 1
            ids.append(f"rrl-score-{self._counter}")
            engine.add_request(ids[-1], prompt, params, lora_request=self._lora)
        done: dict[str, Any] = {}
        while len(done) < len(ids):
            for out in self._step():
                if out.finished:
                    done[out.request_id] = out
        return [done[i] for i in ids]

    # ------------------------------------------------------------------------- continuous generation
    def submit(self, requests: list[Request]) -> None:
        """Admit continuous requests (``ContinuousEngine``); their outputs come back from ``advance`` only."""
        if self._asleep:
            raise RolloutError("the vLLM engine is asleep; call wake() before generating")
        check_prompts([r.prompt_ids for r in requests], self.max_model_len)
        from vllm.inputs import TokensPrompt

        for r in requests:
            prompt = TokensPrompt(prompt_token_ids=list(r.prompt_ids))
            if r.cache_salt is not None:
                prompt["cache_salt"] = r.cache_salt
            self._add(r.id, prompt, self._params(r.sampling, r.seed, delta=r.deltas))
            self._live.add(r.id)
            if not r.deltas:
                self._whole.add(r.id)

    def advance(self) -> list[Delta]:
        """One engine step (and what streams / scores stepped meanwhile): each live request's new tokens."""
        if not self._held:
            self._step()  # continuous requests' outputs are held; this step's are taken below, not next call
        outs, self._held = self._held, []
        found = []
        for out in outs:
            (seq,) = out.outputs
            token_ids = list(seq.token_ids)
            logprobs = (
                [float(s[t].logprob) for s, t in zip(seq.logprobs, token_ids, strict=True)]
                if seq.logprobs
                else []
            )
            if out.finished:
                self._live.discard(out.request_id)
                if self.drafts is not None and out.request_id in self._whole:  # a whole response: a source
                    self.drafts.record(list(out.prompt_token_ids or []), token_ids)
                self._whole.discard(out.request_id)
            found.append(
                Delta(
                    id=out.request_id,
                    token_ids=token_ids,
                    logprobs=logprobs,
                    text=seq.text or "",
                    finished=out.finished,
                    finish_reason="length" if seq.finish_reason == "length" else "stop",
                    cached_tokens=out.num_cached_tokens,
                    drafts=self._drafts(out.request_id) if out.finished else None,
                )
            )
        return found

    def abort(self, ids: list[str]) -> None:
        self.llm.llm_engine.abort_request(list(ids))
        self._forget(ids)
        self._live.difference_update(ids)
        self._whole.difference_update(ids)
        self._held = [o for o in self._held if o.request_id not in set(ids)]

    def running(self) -> int:
        """The scheduler's running batch (in-process engine core); unfinished requests where it is hidden."""
        sched = self._scheduler()
        if sched is not None and isinstance(getattr(sched, "running", None), list):
            return len(sched.running)
        return int(self.llm.llm_engine.get_num_unfinished_requests())

    def _scheduler(self) -> Any:
        """vLLM's scheduler, reachable because the engine core runs in this process; None where it is not."""
        core = getattr(getattr(self.llm.llm_engine, "engine_core", None), "engine_core", None)
        return getattr(core, "scheduler", None)

    def _add(self, rid: str, prompt: Any, params: Any) -> None:
        internal = self.llm.llm_engine.add_request(rid, prompt, params, lora_request=self._lora)
        if self._tally is not None:
            self._internal[rid] = internal

    def _drafts(self, rid: str) -> DraftCounts | None:
        """A finished request's draft counts; None with speculation off."""
        if self._tally is None:
            return None
        return self._tally.pop(self._internal.pop(rid))

    def _forget(self, ids: Iterable[str]) -> None:
        if self._tally is not None:
            self._tally.forget(self._internal.pop(r) for r in ids if r in self._internal)

    def _step(self) -> list[Any]:
        """One engine step; the outputs of continuous requests are held for ``advance``."""
        outs: list[Any] = []
        for out in self.llm.llm_engine.step():
            (self._held if out.request_id in self._live else outs).append(out)
        return outs

    def weight_fingerprints(self) -> EngineWeights:
        """Checksums of the weights vLLM computes with, under its own (fused) names; see ``_fingerprint_model``."""
        found = self.llm.apply_model(_fingerprint_model)
        if len(found) != 1:  # tensor-parallel shards would need per-shard bookkeeping of replicated params
            raise RolloutError(
                f"the freshness check reads one model per engine; this engine has {len(found)} "
                "workers (tensor parallel): set rollout.freshness_check=false"
            )
        fingerprints, packed = found[0]
        return EngineWeights(fingerprints, packed)

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """vLLM's in-place reload (its loader maps names, fuses qkv/gate-up, handles tied embeddings).

        After each reload vLLM warns ``RotaryEmbedding: Failed to load weights`` and, for a tied head,
        ``ParallelLMHead: Failed to load weights``: its layer-wise reloader (``finalize_layerwise_processing``)
        warns for every layer that received no tensor and puts that layer's previous tensors back. Both are
        expected: the rotary cos/sin cache is computed from the config and is in no checkpoint, and a tied head
        has no weight of its own (``named_parameters`` yields the shared embedding once), which
        ``_refresh_tied_head`` re-ties to the new embedding right below. ``rrl train`` hides vLLM's warnings
        unless ``logging.engine_logs``; the e2e tests check the engine's log-probs against the trainer's after
        every hand-off (gap < 1e-3).
        """
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": iter(named_tensors), "is_checkpoint_format": True}
        )
        self.llm.apply_model(_refresh_tied_head)
        self.llm.reset_prefix_cache()

    def load_adapter(self, named_tensors: Iterable[tuple[str, torch.Tensor]], config: dict[str, Any]) -> None:
        """Serve the base model with this LoRA adapter through vLLM's LoRA support (``AdapterEngine``; the
        engine must be built with ``enable_lora``): the tensors (PEFT keys) are written as a PEFT adapter
        directory, which ``add_lora`` loads in place of the previous one; every request then carries it."""
        import json
        import tempfile
        from pathlib import Path

        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        if self._lora_dir is None:
            self._lora_dir = tempfile.mkdtemp(prefix="rrl-lora-")
        root = Path(self._lora_dir)
        tensors = {name: t.detach().cpu().contiguous() for name, t in named_tensors}
        save_file(tensors, str(root / ADAPTER_WEIGHTS))
        (root / ADAPTER_CONFIG).write_text(json.dumps(config), encoding="utf-8")
        self._lora = LoRARequest("policy", 1, str(root), load_inplace=True)
        if not self.llm.llm_engine.add_lora(self._lora):
            raise RolloutError(f"vLLM did not load the LoRA adapter written to {root}")
        self.llm.reset_prefix_cache()

    def adapter_fingerprints(self) -> EngineWeights:
        """Checksums of the adapter file vLLM loaded (what its LoRA loader read), under PEFT keys."""
        from safetensors.torch import load_file

        if self._lora_dir is None:
            return EngineWeights({})
        from pathlib import Path

        return EngineWeights(
            fingerprint_tensors(load_file(str(Path(self._lora_dir) / ADAPTER_WEIGHTS)).items())
        )

    def sleep(self, keep_weights: bool = True) -> None:
        """Free the KV cache; level 1 keeps the weights in host memory, level 2 (``keep_weights=False``)
        discards them, which skips a device-to-host copy when new weights are loaded after ``wake`` anyway.
        No-op without sleep mode (CPU)."""
        if self.sleep_enabled and not self._asleep:
            self.llm.sleep(level=1 if keep_weights else 2)
            self._asleep = True

    def wake(self) -> None:
        if self.sleep_enabled and self._asleep:
            torch.cuda.empty_cache()  # the update's freed blocks back to the device: the KV cache maps them
            self.llm.wake_up()
            self._asleep = False

    @property
    def asleep(self) -> bool:
        return self._asleep


def _fingerprint_model(model: torch.nn.Module) -> tuple[dict[str, Fingerprint], dict[str, list[str]]]:
    """Fingerprint every parameter of the served model, read back from where vLLM computes with it.

    On CPU vLLM pre-packs each linear layer's weight for oneDNN/SGL kernels and leaves an empty ``weight``;
    that layer's weight is recovered exactly by running its packed GEMM on the identity (x = I gives
    x @ W^T = W^T: every output is one product with 1.0 plus exact zeros), so the check sees what the
    kernels use, not a stale copy. Shared (tied) parameters are counted once, under their first name.
    """
    named: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()
    with torch.no_grad():
        for mod_name, mod in model.named_modules():
            for p_name, p in mod.named_parameters(recurse=False):
                if id(p) in seen:
                    continue
                seen.add(id(p))
                full = f"{mod_name}.{p_name}" if mod_name else p_name
                if p.numel() == 0 and p_name == "weight" and hasattr(mod, "cpu_linear"):
                    k = int(mod.input_size_per_partition)
                    eye = torch.eye(k, dtype=p.dtype, device=p.device)
                    named.append((full, mod.cpu_linear(eye, p, None).t()))
                else:
                    named.append((full, p))
        fingerprints = fingerprint_tensors(named)
    packed = {k: list(v) for k, v in (getattr(model, "packed_modules_mapping", None) or {}).items()}
    return fingerprints, packed


def _refresh_tied_head(model: torch.nn.Module) -> bool:
    """Re-tie the LM head to the (reloaded) embedding and re-run its post-load step.

    vLLM's layer-wise reload installs new embedding parameters and re-processes only modules whose
    weights it loaded; a tied head keeps pointing at the OLD embedding (and on CPU at an old pre-packed
    GEMM weight). Measured on the tiny model without this: sampled-token log-prob gap ~21 nats.
    """
    config = getattr(model, "config", None)
    head = getattr(model, "lm_head", None)
    if not getattr(config, "tie_word_embeddings", False) or head is None or not hasattr(head, "tie_weights"):
        return False
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

    embeds = [
        m
        for m in model.modules()
        if isinstance(m, VocabParallelEmbedding) and not isinstance(m, ParallelLMHead)
    ]
    if len(embeds) != 1:
        raise RolloutError(
            f"tied LM head but {len(embeds)} input embeddings found; cannot re-tie after reload"
        )
    head.tie_weights(embeds[0])
    head.quant_method.process_weights_after_loading(head)
    return True


def _to_completion(
    out: Any,
    prompt_index: int,
    sample_index: int,
    prompt_ids: list[int],
    tokenizer: Any,
    drafts: DraftCounts | None,
) -> Completion:
    (seq,) = out.outputs
    token_ids = list(seq.token_ids)
    text = seq.text or tokenizer.decode(
        token_ids, skip_special_tokens=True
    )  # not detokenized without stop strings
    logprobs = (
        [float(step[tok].logprob) for step, tok in zip(seq.logprobs, token_ids, strict=True)]
        if seq.logprobs
        else []
    )
    return Completion(
        prompt_index=prompt_index,
        sample_index=sample_index,
        prompt_ids=prompt_ids,
        token_ids=token_ids,
        logprobs=logprobs,
        text=text,
        finish_reason="length" if seq.finish_reason == "length" else "stop",
        drafts=drafts,
    )


@register_engine("vllm")
def _make(model_path: str, **kw: Any) -> VLLMEngine:
    return VLLMEngine(model_path, **kw)
