"""LoRA adapters as engines receive them (split placement's adapter-only hand-off): PEFT's key names, and what
an engine that serves the base model plus one live adapter offers (``AdapterEngine``).

The names are PEFT's adapter-file keys (``base_model.model.<module>.lora_A.weight``): what
``peft.set_peft_model_state_dict`` and vLLM's LoRA loader read, so an engine needs no name mapping of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from torch import Tensor

from reasoning_rl.rollout.fingerprints import EngineWeights, fingerprint_tensors

PEFT_PREFIX = "base_model.model."
ADAPTER_CONFIG = "adapter_config.json"  # PEFT's file names inside an adapter directory (vLLM reads the same)
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_NAME = "default"  # PEFT's name of the one adapter a policy trains


def is_lora_name(name: str) -> bool:
    """An adapter parameter of a PEFT-injected model (``lora_A`` / ``lora_B``)."""
    return ".lora_" in name


def peft_state_name(name: str) -> str:
    """A module-tree adapter parameter name (``...q_proj.lora_A.default.weight``) as PEFT's adapter files key it
    (``base_model.model....q_proj.lora_A.weight``)."""
    return PEFT_PREFIX + name.replace(f".{ADAPTER_NAME}.", ".")


@runtime_checkable
class AdapterEngine(Protocol):
    """A rollout engine that serves its base model with one LoRA adapter, replaced by ``load_adapter``."""

    def load_adapter(
        self, named_tensors: Iterable[tuple[str, Tensor]], config: dict[str, Any], *, version: int
    ) -> None:
        """Serve ``named_tensors`` (PEFT keys) as the adapter, ``config`` its PEFT ``adapter_config.json``;
        the engine holds policy version ``version`` from then on (as after ``load_weights``)."""
        ...

    def adapter_fingerprints(self) -> EngineWeights:
        """Fingerprints of the adapter tensors the engine now serves, under PEFT keys (the freshness gate)."""
        ...


def write_adapter(root: str, named_tensors: Iterable[tuple[str, Tensor]], config: dict[str, Any]) -> None:
    """``named_tensors`` (PEFT keys) and ``config`` as a PEFT adapter directory ``root`` (what vLLM loads)."""
    import json
    from pathlib import Path

    from safetensors.torch import save_file

    save_file({n: t.detach().cpu().contiguous() for n, t in named_tensors}, str(Path(root) / ADAPTER_WEIGHTS))
    (Path(root) / ADAPTER_CONFIG).write_text(json.dumps(config), encoding="utf-8")


def adapter_file_fingerprints(root: str) -> EngineWeights:
    """Checksums of the adapter file in directory ``root`` (what a LoRA loader read), under PEFT keys."""
    from pathlib import Path

    from safetensors.torch import load_file

    return EngineWeights(fingerprint_tensors(load_file(str(Path(root) / ADAPTER_WEIGHTS)).items()))
