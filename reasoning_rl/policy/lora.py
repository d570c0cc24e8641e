"""PEFT LoRA adapters on the trained causal LM (``model.lora``): attaching them, and reading the model back
as the base model's tensors (merged) or as the adapters alone.

PEFT injects its ``LoraLayer``s into the HF model in place (``q_proj`` becomes a layer holding ``base_layer``,
``lora_A.default`` and ``lora_B.default``), so the policy's ``ScoringModule``, FSDP2's per-layer sharding and the
activation checkpointing all keep working on the same HF module tree; only the adapter parameters require
gradients. The ``PeftModel`` wrapper is kept beside it for ``disable_adapter()`` (the KL reference) and for
PEFT's own adapter format.

Merged tensors are computed per tensor, ``W + scaling * B @ A`` in float32 then cast to ``W``'s dtype, into a
new tensor: the trainer's parameters are never modified (PEFT's ``merge_adapter`` would change them in place and
would need an unmerge after every hand-off).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from reasoning_rl.rollout.adapters import (
    ADAPTER_CONFIG,
    ADAPTER_NAME,
    ADAPTER_WEIGHTS,
    is_lora_name,
    peft_state_name,
)

if TYPE_CHECKING:
    from reasoning_rl.config.model import LoraConfig

BASE_LAYER = ".base_layer."


def add_adapters(lm: nn.Module, spec: LoraConfig, *, upcast: bool, seed: int) -> Any:
    """Inject LoRA adapters into ``lm`` (in place) and freeze everything else; returns the ``PeftModel``.

    ``upcast``: keep the adapters in float32 when ``lm`` is in a half dtype (PEFT's ``autocast_adapter_dtype``):
    they are the trained masters, while the frozen base stays in the compute dtype. The random ``A`` matrices
    are drawn from ``seed`` (the caller's RNG is left as it was), so every rank of a sharded run starts from
    the same adapters: FSDP2 keeps each rank's own rows, and different draws would mix into one adapter."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    peft_config = PeftLoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        target_modules=spec.target_modules,
        lora_dropout=spec.dropout,
        bias="none",
    )
    from reasoning_rl.config import ConfigError

    head = lm.get_output_embeddings()  # type: ignore[operator]
    head_name = next((n for n, m in lm.named_modules() if m is head), None)
    field = f"model.lora.target_modules={spec.target_modules!r}"
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            peft_model = get_peft_model(lm, peft_config, autocast_adapter_dtype=upcast)
    except ValueError as e:  # PEFT names the module list it could not match (over several lines)
        raise ConfigError(f"{field}: {' '.join(str(e).split())}") from e
    layers = lora_layers(lm)
    if head_name in layers and getattr(lm.config, "tie_word_embeddings", False):
        raise ConfigError(
            f"{field} adapts the LM head ({head_name}), which this model "
            "ties to its input embeddings: the merged head would no longer equal the embeddings; leave it out"
        )
    other = {name: type(layer.base_layer).__name__ for name, layer in layers.items() if not _linear(layer)}
    if other:
        name, kind = next(iter(other.items()))
        raise ConfigError(
            f"{field} adapts {len(other)} layer(s) that are not linear (first: {name}: {kind}); the merged "
            "hand-off and the engines' LoRA take linear layers only: name linear layers (e.g. [q_proj, v_proj]) "
            "or 'all-linear'"
        )
    return peft_model


def check_targets(path: str, gguf_file: str | None, spec: LoraConfig) -> None:
    """Attach ``spec``'s adapters exactly as a run does (``add_adapters``), to the model built from its config
    alone on the meta device (no weights read or allocated): the dry run refuses what the run would, in its
    line (targets that match nothing, a tied LM head, a layer that is not linear)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from reasoning_rl.policy.model import ModelLoadError

    try:
        config = AutoConfig.from_pretrained(path, **({"gguf_file": gguf_file} if gguf_file else {}))
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"could not read the config of model {path!r}: {e}") from e
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(config)
        add_adapters(lm, spec, upcast=False, seed=0)


def _linear(layer: Any) -> bool:
    """Whether a PEFT ``LoraLayer`` adapts a linear map with linear A/B (what ``_delta`` merges)."""
    a = getattr(layer, "lora_A", {})
    return ADAPTER_NAME in a and isinstance(a[ADAPTER_NAME], nn.Linear)


def base_name(name: str) -> str:
    """The base model's name of a PEFT-wrapped parameter (``...q_proj.base_layer.weight`` -> ``...q_proj.weight``)."""
    return name.replace(BASE_LAYER, ".")


def full(p: Tensor) -> Tensor:
    """The whole tensor of a parameter (an all-gather under FSDP2: collective), detached."""
    return (p.full_tensor() if hasattr(p, "full_tensor") else p).detach()


def lora_layers(lm: nn.Module) -> dict[str, Any]:
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in lm.named_modules() if isinstance(m, LoraLayer)}


def _delta(layer: Any) -> Tensor:
    """``scaling * B @ A`` of one adapted linear layer, float32, in the base weight's layout (collective)."""
    a, b = layer.lora_A[ADAPTER_NAME], layer.lora_B[ADAPTER_NAME]
    if not isinstance(a, nn.Linear):
        raise ValueError(f"LoRA on {type(layer.base_layer).__name__} layers is not supported (linear only)")
    delta = (full(b.weight).float() @ full(a.weight).float()) * float(layer.scaling[ADAPTER_NAME])
    return delta.T if getattr(layer, "fan_in_fan_out", False) else delta


def merged_parameters(lm: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """The base model's parameters under its own names, each adapted weight merged with its adapter into a new
    tensor (the adapter parameters themselves are not yielded). Collective under FSDP2 (every rank must iterate
    to the end, in the same order)."""
    layers = lora_layers(lm)
    for name, p in lm.named_parameters():
        if is_lora_name(name):
            continue
        tensor = full(p)
        owner, sep, leaf = name.rpartition(BASE_LAYER)
        if sep and leaf == "weight":
            tensor = (tensor.float() + _delta(layers[owner])).to(tensor.dtype)
        yield base_name(name), tensor


def adapter_parameters(lm: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """The adapter tensors alone, under the HF module tree's names (``...q_proj.lora_A.default.weight``).
    Collective under FSDP2."""
    for name, p in lm.named_parameters():
        if is_lora_name(name):
            yield name, full(p)


def adapter_update_norm(lm: nn.Module) -> float:
    """Frobenius norm of the whole update the adapters make to the base weights, sqrt(sum ||s B A||^2), from
    r x r products (||BA||^2 = tr(B^T B A A^T)): 0 at the start (B = 0). Collective under FSDP2."""
    total = 0.0
    for layer in lora_layers(lm).values():
        a = full(layer.lora_A[ADAPTER_NAME].weight).float()
        b = full(layer.lora_B[ADAPTER_NAME].weight).float()
        s = float(layer.scaling[ADAPTER_NAME])
        total += s * s * float(torch.trace((b.T @ b) @ (a @ a.T)).clamp_min(0.0))
    return math.sqrt(total)


BASE_FILE = "base_model.json"  # beside PEFT's adapter_config.json: which base the adapters belong to
_HASHES: dict[tuple[str, int, float], str] = {}


def base_identity(model_dir: str | Path) -> dict[str, str]:
    """The base model's resolved path and a sha256 over its config and weight files (computed once per process
    and file set): adapters are only meaningful on exactly the weights they were trained on."""
    root = Path(model_dir).resolve()
    files = sorted(
        p for p in root.iterdir() if p.name == "config.json" or p.suffix in (".safetensors", ".bin", ".gguf")
    )
    key = (
        str(root),
        sum(p.stat().st_size for p in files),
        max((p.stat().st_mtime for p in files), default=0),
    )
    if key not in _HASHES:
        digest = hashlib.sha256()
        for p in files:
            digest.update(p.name.encode())
            with p.open("rb") as f:
                while chunk := f.read(16 << 20):
                    digest.update(chunk)
        _HASHES[key] = digest.hexdigest()
    return {"path": str(root), "sha256": _HASHES[key]}


def adapter_config_dict(peft_model: Any) -> dict[str, Any]:
    """PEFT's ``adapter_config.json`` of the trained adapter as a JSON-ready dict (sets as sorted lists): what
    an engine needs besides the tensors to serve it (split placement's adapter hand-off)."""
    config = peft_model.peft_config[ADAPTER_NAME].to_dict()
    config["inference_mode"] = True
    out: dict[str, Any] = json.loads(
        json.dumps(config, default=lambda v: sorted(v) if isinstance(v, set) else str(v))
    )
    return out


def write_adapter_config(out_dir: Path, peft_model: Any, model_dir: str | Path) -> None:
    """PEFT's ``adapter_config.json`` (``base_model_name_or_path`` = the base's path) and ``BASE_FILE`` (the
    base's identity) into ``out_dir``: with the adapter tensors this is a PEFT adapter directory."""
    config = copy.deepcopy(peft_model.peft_config[ADAPTER_NAME])
    config.base_model_name_or_path = str(Path(model_dir).resolve())
    config.inference_mode = True
    out_dir.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(out_dir))
    (out_dir / BASE_FILE).write_text(json.dumps(base_identity(model_dir), indent=2), encoding="utf-8")


def check_base(adapter_dir: Path, model_dir: str | Path) -> None:
    """Refuse (one line) adapters saved for another base model than ``model_dir``, or a checkpoint without
    adapters (a full fine-tuning run's) for a LoRA run."""
    from reasoning_rl.config import ConfigError

    saved_file = adapter_dir / BASE_FILE
    if not saved_file.is_file():
        raise ConfigError(
            f"{adapter_dir.parent} holds no LoRA adapters (no {adapter_dir.name}/{BASE_FILE}): it was written by a "
            "full fine-tuning run; resume it with model.lora.rank=0"
        )
    saved = json.loads(saved_file.read_text(encoding="utf-8"))
    now = base_identity(model_dir)
    if saved["sha256"] != now["sha256"]:
        raise ConfigError(
            f"model.path={model_dir}: its weights (sha256 {now['sha256'][:12]}) are not the base the checkpoint's "
            f"adapters were trained on ({saved['path']}, sha256 {saved['sha256'][:12]})"
        )


def is_adapter_dir(path: str | Path) -> bool:
    """A PEFT adapter directory (adapter config, no model config of its own)."""
    p = Path(path)
    return (p / ADAPTER_CONFIG).is_file() and not (p / "config.json").is_file()


def save_adapter_dir(out: Path, manifest: Path, adapters: dict[str, Tensor], tokenizer: Any = None) -> Path:
    """Write a PEFT adapter directory atomically: ``manifest``'s adapter config and base identity, the adapter
    tensors (module-tree names, as a checkpoint holds them) under PEFT's keys, and the tokenizer if given.
    ``peft.PeftModel.from_pretrained(base, out)`` and vLLM's LoRA loader read it."""
    import shutil

    from safetensors.torch import save_file

    from reasoning_rl.atomic import atomic_dir

    with atomic_dir(out) as tmp:
        for name in (ADAPTER_CONFIG, BASE_FILE):
            shutil.copyfile(manifest / name, tmp / name)
        save_file(
            {peft_state_name(k): v.contiguous() for k, v in adapters.items()}, str(tmp / ADAPTER_WEIGHTS)
        )
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
    return out


def merge_adapter_dir(adapter_dir: str | Path, out: str | Path) -> Path:
    """A plain HF model dir at ``out``: the adapter directory's base model (its ``base_model_name_or_path``,
    checked against the saved identity) with the adapters merged in, float32, by PEFT's ``merge_and_unload``."""
    from peft import PeftConfig, PeftModel
    from transformers import AutoTokenizer

    from reasoning_rl.policy.model import ModelLoadError, load_causal_lm, save_hf_model

    src = Path(adapter_dir)
    base_path = str(PeftConfig.from_pretrained(str(src)).base_model_name_or_path)
    if not Path(base_path).is_dir():
        raise ModelLoadError(
            f"adapter dir {src}: its base model {base_path!r} (adapter_config.json) is not found"
        )
    if (src / BASE_FILE).is_file():
        saved = json.loads((src / BASE_FILE).read_text(encoding="utf-8"))["sha256"]
        if saved != base_identity(base_path)["sha256"]:
            raise ModelLoadError(
                f"adapter dir {src}: the weights at {base_path} are not the base its adapters were trained on"
            )
    merged = PeftModel.from_pretrained(
        load_causal_lm(base_path, dtype="float32"), str(src)
    ).merge_and_unload()
    tokenizer = AutoTokenizer.from_pretrained(
        str(src) if (src / "tokenizer_config.json").is_file() else base_path
    )
    return save_hf_model(out, merged, tokenizer)
