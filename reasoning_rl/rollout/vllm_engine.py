"""vLLM rollout engine, colocated with the trainer in the same process.

By default the engine core runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so ``load_weights`` can hand
vLLM a lazy iterator of gathered tensors without pickling or a second full copy of the model. With
``engine_process`` (``rollout.engine_process``) the core runs in a process of its own, where vLLM's host work
(scheduling, sampling bookkeeping) overlaps ours; the weights then travel bucket by bucket through memory both
processes map (``vllm_transfer``).

Under torchrun (world size > 1) vLLM builds its groups from the existing default process group, and
group creation is collective: create the engine on EVERY rank at the same point (one engine per
rank, data-parallel rollout). An engine on rank 0 alone hangs there (measured on CPU/gloo).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any, TypeVar

import torch

from reasoning_rl.config import SpeculativeConfig
from reasoning_rl.rollout.base import (
    Completion,
    Delta,
    DraftCounts,
    Request,
    RolloutError,
    SamplingConfig,
    check_prompts,
)
from reasoning_rl.rollout.fingerprints import EngineWeights
from reasoning_rl.rollout.group_drafts import GroupDrafts
from reasoning_rl.rollout.version_spans import VersionSpans
from reasoning_rl.rollout.vllm_cpu_kernels import cpu_engine_args, patch_cpu_rejection_sampler
from reasoning_rl.rollout.vllm_drafter import (
    DraftTally,
    attach,
    gate_drafts,
    group_drafts,
    speculative_config,
)
from reasoning_rl.rollout.vllm_lora import LiveAdapter
from reasoning_rl.rollout.vllm_model import (
    copies_in_place,
    fingerprint_model,
    load_in_place,
    refresh_tied_head,
)
from reasoning_rl.rollout.vllm_outputs import (
    partial_delta,
    prompt_logprob_rows,
    request_params,
    sampled_logprobs,
    startup_memory_refusal,
    to_completion,
)
from reasoning_rl.rollout.vllm_step_tokens import StepTokens
from reasoning_rl.rollout.vllm_transfer import apply_model, ship

log = logging.getLogger(__name__)
R = TypeVar("R")


class VLLMEngine:
    """``RolloutEngine`` on ``vllm.LLM``. Log-probs are vLLM's ``raw_logprobs`` (before temperature/top-p).

    ``speculative`` (``rollout.speculative``, method not off): vLLM's speculative decoding with that drafter,
    each completion (and each request's finishing delta) carrying its draft counts; with ``group`` every
    finished whole sample (streamed, or a continuous request with ``deltas=False``: the synchronous step) is
    recorded as a draft source for its prompt's later samples (``drafts``).

    Prefix cache: every request the engine admits (stream, score, continuous) carries the cache salt of the
    weights and adapter it holds (``cache_salt``), so no request ever reuses KV blocks computed with older ones,
    whether or not vLLM agreed to drop them: with resident continuous requests (``rollout.max_lag > 0``) vLLM
    refuses ``reset_prefix_cache`` ("blocks are not freed yet"); the refused reset is logged and retried once
    no continuous request is resident (the old blocks are unreachable meanwhile, and only take cache room)."""

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
        engine_process: bool = False,
        handoff_bucket_bytes: int = 256 << 20,
        **kw: Any,
    ) -> None:
        """``engine_process``: vLLM's engine core in a process of its own (see the module); refused with
        speculation (its draft counts are read from the in-process scheduler). ``handoff_bucket_bytes``: the most
        bytes one hand-off call moves to that process."""
        if engine_process and speculative is not None and speculative.on:
            raise RolloutError(
                "rollout.speculative needs the in-process engine core: set rollout.engine_process=false"
            )
        # ours to set, per engine: vLLM reads it when the LLM starts (its environment cache, which an earlier
        # engine in this process turned on, is dropped first so this engine's choice holds)
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if engine_process else "0"
        if engine_process:  # apply_model / collective_rpc send our functions to that process (cloudpickle)
            os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
        from vllm import LLM, envs

        envs.disable_envs_cache()
        self.engine_process = engine_process
        self.handoff_bucket_bytes = handoff_bucket_bytes

        on_gpu = torch.cuda.is_available()
        self.sleep_enabled = on_gpu if enable_sleep_mode is None else enable_sleep_mode
        if self.sleep_enabled and not on_gpu:
            raise RolloutError(
                "enable_sleep_mode=True needs a CUDA device; vLLM's CPU backend has no sleep mode"
            )
        if not on_gpu:
            dtype = "float32" if dtype == "auto" else dtype
            cpu_engine_args(kw)
        self.max_model_len = max_model_len
        self._asleep = False
        self._counter = 0
        self._live: set[str] = set()  # continuous requests (``submit``): resident across streams and updates
        self._whole: set[str] = set()  # those whose one output holds the whole response (deltas=False)
        self._spans = VersionSpans()  # the unfinished whole ones: their tokens' versions (``loaded``)
        # their outputs from steps a stream or score() took, for ``advance``, each with its version(s)
        self._held: list[tuple[Any, int, list[int] | None]] = []
        self._adapter = LiveAdapter()  # split placement's adapter hand-off
        self._loads = 0  # weight/adapter loads so far: the cache salt of what the engine holds now
        self._version = 0  # the policy version of the weights it holds (0: those it was built with)
        self._reset_pending = False  # a prefix-cache reset vLLM refused, retried once nothing is resident
        if speculative is not None and speculative.on:
            kw.update(speculative_config=speculative_config(speculative))
            if not on_gpu:
                patch_cpu_rejection_sampler()
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
        if (self._scheduler() is None) != engine_process:
            raise RolloutError(
                f"vLLM started its engine core {'in this' if engine_process else 'in another'} process, not as "
                f"engine_process={engine_process} asked"
            )
        self.tokenizer = self.llm.get_tokenizer()
        # continuous requests' tokens, each counted in the step that sampled it
        self._tokens = StepTokens(self.llm.llm_engine)
        self._sampled = 0  # their count at the last ``advance`` (``sampled``)
        self._tally: DraftTally | None = None  # rollout.speculative: each request's draft counts
        self._internal: dict[str, str] = {}  # our request id -> vLLM's internal one (its state's key)
        if speculative is not None and speculative.on:
            scheduler = self._scheduler()
            if scheduler is None:
                raise RolloutError("rollout.speculative needs vLLM's in-process scheduler to count drafts")
            self._tally = DraftTally(scheduler)
        self.drafts: GroupDrafts | None = None
        if speculative is not None and speculative.method == "group":
            self.drafts = group_drafts(speculative)
            self.llm.collective_rpc(attach, args=(self.drafts,))
        if speculative is not None and speculative.on and speculative.max_batch:
            self.llm.collective_rpc(gate_drafts, args=(speculative.max_batch,))
        # whether a hand-off may copy straight into vLLM's tensors (``load_weights``); one answer per worker
        self.loads_in_place = all(self._apply_model(copies_in_place))

    def _apply_model(self, fn: Callable[[torch.nn.Module], R]) -> list[R]:
        """``fn`` on the served model in each worker, its result as returned (``engine_process``: pickled by us)."""
        return apply_model(self.llm, fn) if self.engine_process else self.llm.apply_model(fn)

    @property
    def cache_salt(self) -> str:
        """The prefix-cache salt of the weights and adapter the engine holds now (changes with every load)."""
        return f"rrl-w{self._loads}"

    def _prompt(self, token_ids: list[int]) -> Any:
        """The one place a request's prompt is built: its tokens, salted with the weights the engine holds."""
        from vllm.inputs import TokensPrompt

        return TokensPrompt(prompt_token_ids=list(token_ids), cache_salt=self.cache_salt)

    @property
    def version(self) -> int:
        return self._version

    def loaded(self, version: int) -> None:
        """After new weights or a new adapter (policy ``version``): each unfinished whole request's tokens so
        far are of the old version (``VersionSpans``); a new salt, the old blocks dropped where vLLM agrees."""
        states: dict[str, Any] = self.llm.llm_engine.output_processor.request_states
        counts = ((r, states[self._internal[r]].detokenizer.num_output_tokens()) for r in self._spans.ids())
        self._spans.swap(counts, version)
        self._version = version
        self._loads += 1
        self._reset_pending = True
        self._reset()

    def _reset(self) -> None:
        """Drop prefix-cache blocks of older weights: vLLM refuses while requests hold blocks (resident
        continuous requests), so a refusal is retried once none is resident (``_retry_reset``); the salt keeps
        the old blocks unreachable meanwhile."""
        if self.llm.reset_prefix_cache() is False:
            log.info("vLLM refused to reset the prefix cache (blocks in use); salted apart, retried later")
        else:
            self._reset_pending = False

    def _retry_reset(self) -> None:
        if self._reset_pending and not self._live:
            self._reset()

    def stream(self, prompts: list[list[int]], sampling: SamplingConfig) -> Iterator[Completion]:
        """One vLLM request per (prompt, sample) so each sample is yielded the step it finishes.

        With ``sampling.seed`` set, sample j of every prompt uses seed + j (reproducible per sample);
        ``sampling.prompt_seeds`` gives each prompt its own base seed instead.
        """
        if self._asleep:
            raise RolloutError("the vLLM engine is asleep; call wake() before generating")
        check_prompts(prompts, self.max_model_len)
        engine = self.llm.llm_engine
        if engine.get_num_unfinished_requests() > len(self._live):
            raise RolloutError("the vLLM engine already has requests in flight; one stream at a time")
        self._retry_reset()
        where: dict[str, tuple[int, int]] = {}
        for i, prompt in enumerate(prompts):
            for j in range(sampling.n):
                self._counter += 1
                rid = f"rrl-{self._counter}"
                self._add(
                    rid,
                    self._prompt(prompt),
                    request_params(sampling, sampling.seed_for(i, j)),
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
                    done = to_completion(
                        out,
                        i,
                        j,
                        list(prompts[i]),
                        self.tokenizer,
                        self._drafts(out.request_id),
                        self._version,  # no load runs inside a stream: all its tokens are of this version
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

        check_prompts(sequences, self.max_model_len)
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        prompts = [self._prompt(s) for s in sequences]
        # LLM.generate steps until the engine is empty: with resident continuous requests, score alone
        outs = self._score_beside_live(prompts, params) if self._live else None
        if outs is None:
            outs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=self._adapter.request)
        return prompt_logprob_rows(sequences, prompt_lens, outs)

    def _score_beside_live(self, prompts: list[Any], params: Any) -> list[Any]:
        """Score requests stepped next to the resident continuous ones (whose outputs are held for ``advance``),
        so a check after a hand-off neither finishes nor loses them."""
        engine = self.llm.llm_engine
        ids = []
        for prompt in prompts:
            self._counter += 1
            ids.append(f"rrl-score-{self._counter}")
            engine.add_request(ids[-1], prompt, params, lora_request=self._adapter.request)
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
        for r in requests:
            self._add(r.id, self._prompt(r.prompt_ids), request_params(r.sampling, r.seed, delta=r.deltas))
            self._live.add(r.id)
            self._tokens.track(self._internal[r.id], logprobs=r.sampling.logprobs and not r.deltas)
            if not r.deltas:
                self._whole.add(r.id)
                self._spans.start(r.id, self._version)

    def advance(self) -> list[Delta]:
        """One engine step (and what streams / scores stepped meanwhile): each live request's new tokens."""
        if not self._held:
            self._step()  # continuous requests' outputs are held; this step's are taken below, not next call
        outs, self._held = self._held, []
        self._sampled = self._tokens.total
        found = []
        for out, version, versions in outs:
            (seq,) = out.outputs
            token_ids = list(seq.token_ids)
            kept = self._tokens.kept(self._internal.get(out.request_id, ""), len(token_ids))
            logprobs = sampled_logprobs(seq.logprobs, token_ids) if kept is None else kept
            if out.finished:
                self._live.discard(out.request_id)
                self._retry_reset()
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
                    version=version,
                    versions=versions,
                )
            )
        return found

    @property
    def sampled(self) -> int:
        return self._sampled

    def partial(self, ids: list[str]) -> list[Delta]:
        """Each unfinished whole (``deltas=False``) request's output so far, read from vLLM's own per-request
        state: for a park or a checkpoint, never per step. Finished ones (held for ``advance``) are left out."""
        states: dict[str, Any] = self.llm.llm_engine.output_processor.request_states
        ours = {rid: self._internal.get(rid, "") for rid in ids if rid in self._spans}
        kept = self._tokens.kept  # the log-probs of a whole request are kept there
        return [
            partial_delta(rid, states[i], self._spans, kept(i, states[i].detokenizer.num_output_tokens()))
            for rid, i in ours.items()
            if i in states
        ]

    def abort(self, ids: list[str]) -> None:
        self.llm.llm_engine.abort_request(list(ids))
        self._forget(ids)
        self._live.difference_update(ids)
        self._whole.difference_update(ids)
        self._spans.forget(ids)
        self._held = [h for h in self._held if h[0].request_id not in set(ids)]
        self._retry_reset()

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
        self._internal[rid] = self.llm.llm_engine.add_request(
            rid, prompt, params, lora_request=self._adapter.request
        )

    def _drafts(self, rid: str) -> DraftCounts | None:
        """A finished request's draft counts (None with speculation off); its internal id forgotten."""
        internal = self._internal.pop(rid)
        self._tokens.forget([internal])
        return None if self._tally is None else self._tally.pop(internal)

    def _forget(self, ids: Iterable[str]) -> None:
        internal = [self._internal.pop(r) for r in ids if r in self._internal]
        self._tokens.forget(internal)
        if self._tally is not None:
            self._tally.forget(internal)

    def _step(self) -> list[Any]:
        """One engine step; the outputs of continuous requests are held for ``advance``."""
        outs: list[Any] = []
        for out in list[Any](self.llm.llm_engine.step()):
            rid = out.request_id
            if rid in self._spans and out.finished:  # a whole response: its versions from the swaps it saw
                self._held.append((out, *self._spans.versions(rid, len(out.outputs[0].token_ids))))
                self._spans.forget([rid])
            elif rid in self._live:
                self._held.append((out, self._version, None))
            else:
                outs.append(out)
        return outs

    def weight_fingerprints(self) -> EngineWeights:
        """Checksums of the weights vLLM computes with, under its own (fused) names; see ``fingerprint_model``."""
        found = self._apply_model(fingerprint_model)
        if len(found) != 1:  # tensor-parallel shards would need per-shard bookkeeping of replicated params
            raise RolloutError(
                f"the freshness check reads one model per engine; this engine has {len(found)} "
                "workers (tensor parallel): set rollout.freshness_check=false"
            )
        fingerprints, packed = found[0]
        return EngineWeights(fingerprints, packed)

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], *, version: int) -> None:
        """Copy new weights into the engine: straight into vLLM's tensors by the model's own loader where every
        layer is unquantized and unpacked (``copies_in_place``: any CUDA engine of ours), else (vLLM's CPU backend
        pre-packs linear weights) by vLLM's layer-wise ``reload_weights``, which re-runs each layer's post-load
        step. Both map names, fuse q/k/v and gate/up and handle tied embeddings. The layer-wise reload warns
        ``RotaryEmbedding`` / ``ParallelLMHead: Failed to load weights`` for layers that get no tensor (the rotary
        cache is computed from the config; a tied head has no weight of its own and ``refresh_tied_head`` re-ties
        it): expected, and hidden by ``rrl train`` unless ``logging.engine_logs``. With ``engine_process`` the same
        loader runs in the engine's process, on buckets it maps (``vllm_transfer.ship``)."""
        if self.engine_process:
            ship(
                [self.llm],
                named_tensors,
                in_place=self.loads_in_place,
                bucket_bytes=self.handoff_bucket_bytes,
            )
        elif self.loads_in_place:
            self._apply_model(partial(load_in_place, weights=iter(named_tensors)))
        else:
            self.llm.collective_rpc(
                "reload_weights",
                kwargs={"weights_iterator": iter(named_tensors), "is_checkpoint_format": True},
            )
            self._apply_model(refresh_tied_head)
        self.loaded(version)

    def load_adapter(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], config: dict[str, Any], *, version: int
    ) -> None:
        """Serve the base model with this LoRA adapter through vLLM's LoRA support (``AdapterEngine``,
        ``LiveAdapter``); every request then carries it."""
        self._adapter.replace(self.llm, named_tensors, config)
        self.loaded(version)

    def adapter_fingerprints(self) -> EngineWeights:
        return self._adapter.fingerprints()

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

    def close(self) -> None:
        """At shutdown: remove the live adapter's directory (otherwise removed when the engine is collected
        or the process exits) and end an engine process (left to interpreter exit, its client's threads
        aborted the trainer after a clean run: "terminate called without an active exception")."""
        self._adapter.close()
        if self.engine_process:
            self.llm.llm_engine.engine_core.shutdown()
