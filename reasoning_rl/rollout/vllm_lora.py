"""The one LoRA adapter a vLLM engine serves (split placement's adapter-only hand-off, ``AdapterEngine``): its
``LoRARequest``, which every request of the engine carries, and the PEFT directory vLLM loaded it from."""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Iterable
from typing import Any

import torch

from reasoning_rl.rollout.adapters import adapter_file_fingerprints, write_adapter
from reasoning_rl.rollout.base import RolloutError
from reasoning_rl.rollout.fingerprints import EngineWeights


class LiveAdapter:
    """Each adapter gets a fresh directory; the replaced one is removed once vLLM holds the new one (the last at
    ``close``, garbage collection or exit)."""

    def __init__(self) -> None:
        self.request: Any = None  # the LoRARequest of the live adapter (None: the base model alone)
        self._dir: str | None = None
        self._cleanup: weakref.finalize | None = None  # removes ``_dir`` (close, collection or exit)

    def replace(
        self, llm: Any, named_tensors: Iterable[tuple[str, torch.Tensor]], config: dict[str, Any]
    ) -> None:
        """The tensors (PEFT keys) written as a PEFT adapter directory, which vLLM's ``add_lora`` loads in place of
        the previous adapter (the engine must be built with ``enable_lora``)."""
        from vllm.lora.request import LoRARequest

        root = tempfile.mkdtemp(prefix="rrl-lora-")
        cleanup = weakref.finalize(self, shutil.rmtree, root, ignore_errors=True)
        try:
            write_adapter(root, named_tensors, config)
            lora = LoRARequest("policy", 1, str(root), load_inplace=True)
            if not llm.llm_engine.add_lora(lora):
                raise RolloutError(f"vLLM did not load the LoRA adapter written to {root}")
        except BaseException:
            cleanup()
            raise
        self.close()  # the replaced adapter's directory
        self.request, self._dir, self._cleanup = lora, root, cleanup

    def fingerprints(self) -> EngineWeights:
        """Checksums of the adapter file vLLM loaded (what its LoRA loader read), under PEFT keys."""
        return EngineWeights({}) if self._dir is None else adapter_file_fingerprints(self._dir)

    def close(self) -> None:
        """Remove the live adapter's directory; the engine serves the base model alone from then on."""
        if self._cleanup is not None:
            self._cleanup()
        self.request, self._dir, self._cleanup = None, None, None
