"""Plain-transformers rollout engine for machines without vLLM: slower, same contract and outputs."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from reasoning_rl.rollout.adapters import is_lora_name, peft_state_name
from reasoning_rl.rollout.base import Completion, RolloutError, SamplingConfig, check_prompts, register_engine
from reasoning_rl.rollout.fingerprints import EngineWeights, fingerprint_tensors


class HFEngine:
    """``RolloutEngine`` on ``model.generate``, one prompt at a time (n samples batched).

    Log-probs are of the raw logits (temperature 1, no top-p), like the vLLM engine's ``raw_logprobs``.
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

    def stream(self, prompts: list[list[int]], sampling: SamplingConfig) -> Iterator[Completion]:
        check_prompts(prompts, self.max_model_len)
        for i, prompt in enumerate(prompts):
            yield from self._generate_one(i, prompt, sampling)

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        return list(self.stream(prompts, sampling))

    def _generate_one(self, index: int, prompt: list[int], s: SamplingConfig) -> list[Completion]:
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        max_new = min(s.max_tokens, self.max_model_len - len(prompt))
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new,
            "num_return_sequences": s.n,
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
            torch.manual_seed(self._seed(index, s))
            with torch.no_grad():
                out = self.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        new = out.sequences[:, len(prompt) :].cpu()
        logp = torch.stack(out.logits, dim=1).float().log_softmax(-1).cpu()  # [n, steps, vocab]
        return [self._completion(index, j, prompt, new[j], logp[j], eos_ids, s) for j in range(s.n)]

    def _seed(self, index: int, s: SamplingConfig) -> int:
        """Per call: prompt ``index``'s own seed when given, else the request's (or engine's) seed + index."""
        if s.prompt_seeds is not None:
            return s.prompt_seeds[index]
        return (self.seed if s.seed is None else s.seed) + s.prompt_offset + index

    def _completion(
        self,
        index: int,
        j: int,
        prompt: list[int],
        toks: torch.Tensor,
        logp: torch.Tensor,
        eos_ids: set[int],
        s: SamplingConfig,
    ) -> Completion:
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
        versions = [self._version] * len(token_ids)
        return Completion(index, j, list(prompt), token_ids, lps, text, finish, versions=versions)

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
