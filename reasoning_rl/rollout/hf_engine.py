"""Plain-transformers rollout engine for machines without vLLM: slower, same contract and outputs."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from reasoning_rl.rollout.adapters import is_lora_name, peft_state_name
from reasoning_rl.rollout.base import (
    Completion,
    Delta,
    Request,
    RolloutError,
    SamplingConfig,
    check_prompts,
    register_engine,
)
from reasoning_rl.rollout.fingerprints import EngineWeights, fingerprint_tensors


class _Sampled(NamedTuple):
    """One sampled response, before it is a ``Completion`` (``stream``) or a ``Delta`` (``advance``)."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str


@dataclass
class _Batch:
    """Submitted requests that share a group, a prompt and a request: one ``generate`` call from one seeded
    RNG stream (request k is row k), as ``stream`` draws a prompt's n samples, so both paths sample alike."""

    ids: list[str]
    group: int
    prompt: list[int]
    sampling: SamplingConfig
    seed: int


class HFEngine:
    """``RolloutEngine`` and ``ContinuousEngine`` on ``model.generate``, one prompt's samples (batched) per call.

    Continuous requests wait in submission order; ``advance`` runs the oldest batch to its end, so every
    delta is a whole response and nothing is mid-sample at an update. A batch draws from the seed of its first
    request + ``sampling.prompt_offset`` (the frontier passes the group's place in its admission), the seed
    ``stream`` gives prompt i of a call (seed + i): a synchronous continuous step samples what a streamed one
    did. Log-probs are of the raw logits (temperature 1, no top-p), like the vLLM engine's ``raw_logprobs``.
    ``sleep``/``wake`` move the weights to host memory and back on GPU; no-ops on CPU.
    """

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: int = 1024,
        device: str | None = None,
        **_ignored: Any,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if dtype == "auto":
            dtype = "bfloat16" if self.device.type == "cuda" else "float32"
        self.model: Any
        self.tokenizer: Any
        try:
            self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype))
            self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        except (OSError, AttributeError) as e:
            raise RolloutError(f"could not load HF model {model_path!r} with dtype {dtype!r}: {e}") from e
        self.model.to(self.device).eval()
        self.seed = seed
        self.max_model_len = max_model_len
        self._params = dict(self.model.named_parameters())
        self._asleep = False
        self._adapters: dict[str, torch.Tensor] | None = None  # PEFT key -> live adapter parameter
        self._version = 0  # the policy version of the weights it holds (0: those it was built with)
        self._queue: deque[_Batch] = deque()  # submitted continuous requests, oldest first
        self.sampled = 0  # their tokens so far (``ContinuousEngine.sampled``), counted as a batch is made

    # ------------------------------------------------------------------------------- streamed requests
    def stream(self, prompts: list[list[int]], sampling: SamplingConfig) -> Iterator[Completion]:
        """Each prompt's samples as one batch, beside (never through) the submitted requests' queue."""
        check_prompts(prompts, self.max_model_len)
        for i, prompt in enumerate(prompts):
            rows = self._sample(prompt, sampling, sampling.n, self._seed(i, sampling))
            for j, row in enumerate(rows):
                yield Completion(i, j, list(prompt), *row, versions=[self._version] * len(row.token_ids))

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        return list(self.stream(prompts, sampling))

    def _seed(self, index: int, s: SamplingConfig) -> int:
        """Per call: prompt ``index``'s own seed when given, else the request's (or engine's) seed + index."""
        if s.prompt_seeds is not None:
            return s.prompt_seeds[index]
        return self._offset_seed(s.seed, s.prompt_offset + index)

    def _offset_seed(self, seed: int | None, index: int) -> int:
        """Prompt ``index`` of a batch whose seed is ``seed`` (None: the engine's), streamed or submitted."""
        return (self.seed if seed is None else seed) + index

    # --------------------------------------------------------------------------- continuous requests
    def submit(self, requests: list[Request]) -> None:
        """Queue these requests (``ContinuousEngine``), consecutive samples of one group as one batch."""
        check_prompts([r.prompt_ids for r in requests], self.max_model_len)
        new: list[_Batch] = []
        for r in requests:
            last = new[-1] if new else None
            if last and (last.group, last.prompt, last.sampling) == (r.group, r.prompt_ids, r.sampling):
                last.ids.append(r.id)
                continue
            seed = self._offset_seed(r.seed, r.sampling.prompt_offset)
            new.append(_Batch([r.id], r.group, list(r.prompt_ids), r.sampling, seed))
        self._queue.extend(new)

    def advance(self) -> list[Delta]:
        """The oldest batch, generated to its end: one finished delta per request (none when idle)."""
        if not self._queue:
            return []
        batch = self._queue[0]
        rows = self._sample(batch.prompt, batch.sampling, len(batch.ids), batch.seed)
        self._queue.popleft()  # only once generated: a failed call (e.g. asleep) leaves the queue as it was
        self.sampled += sum(len(row.token_ids) for row in rows)
        return [
            Delta(
                rid,
                row.token_ids,
                row.logprobs,
                row.text,
                True,
                row.finish_reason,
                cached_tokens=0,
                version=self._version,  # a batch generates whole, between two loads: all of one version
            )
            for rid, row in zip(batch.ids, rows, strict=True)
        ]

    def abort(self, ids: list[str]) -> None:
        gone = set(ids)
        for batch in self._queue:
            batch.ids = [i for i in batch.ids if i not in gone]
        self._queue = deque(b for b in self._queue if b.ids)

    def running(self) -> int:
        """Requests submitted and not finished (they wait their turn: one batch generates at a time)."""
        return sum(len(b.ids) for b in self._queue)

    def partial(self, ids: list[str]) -> list[Delta]:
        """Nothing: a batch generates whole inside one ``advance``, so no request is ever mid-sample."""
        return []

    # ------------------------------------------------------------------------------------- sampling
    def _sample(self, prompt: list[int], s: SamplingConfig, n: int, seed: int) -> list[_Sampled]:
        """``n`` samples of ``prompt`` in one ``generate`` call, its RNG seeded with ``seed``."""
        if self._asleep:
            raise RolloutError("the HF engine is asleep; call wake() before generating")
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        max_new = min(s.max_tokens, self.max_model_len - len(prompt))
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new,
            "num_return_sequences": n,
            "output_logits": True,
            "return_dict_in_generate": True,
            "pad_token_id": self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else next(iter(eos_ids), 0),
        }
        if s.temperature > 0:
            kwargs.update(do_sample=True, temperature=s.temperature, top_p=s.top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if s.ignore_eos:
            kwargs.update(min_new_tokens=max_new)
            eos_ids = set()
        if s.stop:
            kwargs.update(stop_strings=list(s.stop), tokenizer=self.tokenizer)
        ids = torch.tensor([prompt], device=self.device)
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(seed)
            with torch.no_grad():
                out = self.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        new = out.sequences[:, len(prompt) :].cpu()
        logp = torch.stack(out.logits, dim=1).float().log_softmax(-1).cpu()  # [n, steps, vocab]
        return [self._response(new[j], logp[j], eos_ids, s) for j in range(n)]

    def _response(
        self, toks: torch.Tensor, logp: torch.Tensor, eos_ids: set[int], s: SamplingConfig
    ) -> _Sampled:
        token_ids: list[int] = []
        finish = "length"
        text: str = ""
        for tok in toks.tolist():
            token_ids.append(tok)
            if tok in eos_ids:
                finish = "stop"
                break
            text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
            hit = [text.index(st) for st in s.stop if st in text]
            if hit:
                text, finish = text[: min(hit)], "stop"
                break
        else:
            text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        lps = logp[torch.arange(len(token_ids)), torch.tensor(token_ids)].tolist()
        return _Sampled(token_ids, lps, text, finish)

    def score(self, sequences: list[list[int]], prompt_lens: list[int]) -> list[list[float]]:
        """Log-probs of ``seq[prompt_len:]`` under the engine's weights (the freshness probe's engine side)."""
        check_prompts(sequences, self.max_model_len)
        rows = []
        with torch.no_grad():
            for seq, p in zip(sequences, prompt_lens, strict=True):
                ids = torch.tensor([seq], device=self.device)
                logp = self.model(ids).logits[0, p - 1 : -1].float().log_softmax(-1)
                rows.append(logp.gather(-1, ids[0, p:, None])[:, 0].cpu().tolist())
        return rows

    def weight_fingerprints(self) -> EngineWeights:
        """Checksums of the parameters the engine computes with (HF names, nothing fused)."""
        return EngineWeights(fingerprint_tensors(self.model.named_parameters()))

    @property
    def version(self) -> int:
        return self._version

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], *, version: int) -> None:
        with torch.no_grad():
            for name, tensor in named_tensors:
                if name not in self._params:
                    raise RolloutError(f"load_weights: the model has no parameter {name!r}")
                self._params[name].copy_(tensor)
        self._version = version

    def load_adapter(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], config: dict[str, Any], *, version: int
    ) -> None:
        """Serve the base model with this LoRA adapter (``AdapterEngine``): PEFT injects its layers into the
        model on the first call; every call copies the tensors in (PEFT keys) and refuses an unknown one."""
        if self._adapters is None:
            from peft import PeftConfig, get_peft_model

            get_peft_model(self.model, PeftConfig.from_peft_type(**config))  # in place: self.model now adapts
            self.model.eval()
            self._adapters = {
                peft_state_name(n): p for n, p in self.model.named_parameters() if is_lora_name(n)
            }
        with torch.no_grad():
            for name, tensor in named_tensors:
                if name not in self._adapters:
                    raise RolloutError(f"load_adapter: the model has no adapter parameter {name!r}")
                self._adapters[name].copy_(tensor)
        self._version = version

    def adapter_fingerprints(self) -> EngineWeights:
        """Checksums of the adapter parameters the engine computes with, under PEFT keys."""
        return EngineWeights(fingerprint_tensors((self._adapters or {}).items()))

    def sleep(self, keep_weights: bool = True) -> None:
        if self.device.type == "cuda" and not self._asleep:  # host memory holds them either way
            self.model.to("cpu")
            torch.cuda.empty_cache()
            self._asleep = True

    def wake(self) -> None:
        if self._asleep:
            self.model.to(self.device)
            self._asleep = False

    @property
    def asleep(self) -> bool:
        return self._asleep


@register_engine("hf")
def _make(model_path: str, **kw: Any) -> HFEngine:
    kw.pop("gpu_memory_utilization", None)
    kw.pop("enable_sleep_mode", None)
    return HFEngine(model_path, **kw)
