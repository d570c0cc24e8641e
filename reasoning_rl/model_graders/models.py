"""The model side of the model-backed graders: which files a model is (the hash that enters cache keys), and
loading it once per process (a grading worker keeps it for every grade it does). torch/transformers/vLLM are
imported here only, inside the functions, so ``rrl graders list`` and the config check stay light."""

from __future__ import annotations

import hashlib
import threading
from functools import cache
from pathlib import Path
from typing import Any

from reasoning_rl.inductor_isa import remember_isa_checks

_lock = threading.Lock()
_loaded: dict[tuple[str, str, str], Any] = {}


class ModelError(RuntimeError):
    """The model cannot be used (missing directory, wrong head, load failure): the grader's ``error``."""


def model_dir(path: Any) -> Path:
    """The checkout directory an option names; ModelError naming it when there is none."""
    if not isinstance(path, str | Path) or not str(path):
        raise ModelError("option `path` (a Hugging Face checkpoint directory) is required")
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ModelError(f"model path {path!r} is not a directory")
    return root.resolve()


def check_path(grader: str, options: dict[str, Any]) -> None:
    """ValueError naming the option when ``path`` is given and is no directory (checked before any grading)."""
    if "path" in options:
        try:
            model_dir(options["path"])
        except ModelError as exc:
            raise ValueError(f"{grader}: {exc}") from None


def missing_model(grader: str, setup: dict[str, Any]) -> str | None:
    """Why the grader cannot run with these setup options (no model directory), or None."""
    if not setup.get("path"):
        return f"no model: set the option {grader}.path (a checkpoint directory)"
    try:
        model_dir(setup["path"])
    except ModelError as exc:
        return str(exc)
    return None


def files_hash(path: Any) -> str:
    """sha256 over every file of the model directory (names and bytes), first 16 hex digits. Re-read only when
    a file's name, size or mtime changed, so asking once per grade costs a directory listing."""
    root = model_dir(path)
    stamp = tuple(
        (str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    )
    return _digest(str(root), stamp)


@cache
def _digest(root: str, stamp: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in stamp:
        digest.update(name.encode("utf-8", "surrogatepass") + b"\0")
        with open(Path(root) / name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def model_version(path: Any) -> str:
    """What a model-backed grader's cache key adds to its version: the directory and its files' hash."""
    return f"model={model_dir(path)}@{files_hash(path)}"


def device_for(option: Any) -> str:
    """``auto``: the GPU when there is one, else the CPU."""
    if option not in ("auto", "cpu", "cuda"):
        raise ModelError(f"option `device` must be auto, cpu or cuda, got {option!r}")
    if option != "auto":
        return str(option)
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def warm() -> None:
    """Import torch and transformers ahead of the first grade (imports must not eat a grade's budget)."""
    import torch  # noqa: F401
    import transformers  # noqa: F401


class ModelGrader:
    """What every model-backed grader shares: its options checked against ``defaults`` (unknown keys, the model
    path, positive integers), the model's files in the cache key, the missing-model check and the warm-up."""

    name: str
    defaults: dict[str, Any]

    def checked_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` over the defaults; ValueError naming an unknown key or a path that is no directory."""
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            raise ValueError(f"{self.name}: unknown option(s) {unknown}; known: {', '.join(self.defaults)}")
        check_path(self.name, options)
        return {**self.defaults, **options}

    def check_positive_ints(self, opts: dict[str, Any], keys: tuple[str, ...]) -> None:
        for key in keys:
            if isinstance(opts[key], bool) or not isinstance(opts[key], int) or opts[key] < 1:
                raise ValueError(f"{self.name}: option `{key}` must be an integer >= 1, got {opts[key]!r}")

    def version_for(self, options: dict[str, Any]) -> str:
        """The model directory and its files' hash enter the cache key: a changed model regrades."""
        return model_version(options.get("path"))

    def unavailable(self, setup: dict[str, Any]) -> str | None:
        return missing_model(self.name, setup)

    def warm(self) -> None:
        warm()


def load(kind: str, path: Any, device: str, memory_share: float = 0.3) -> Any:
    """(model, tokenizer) of ``kind`` (``reward``: a one-output sequence classifier; ``causal``: a generative
    LM) for this process, loaded on first use; ``vllm``: a ``vllm.LLM`` holding ``memory_share`` of the
    device's memory. The entry is keyed by the files' hash too, so a changed directory is loaded afresh."""
    root = model_dir(path)
    key = (kind, f"{root}@{files_hash(root)}", f"{device}:{memory_share}")
    with _lock:
        if key not in _loaded:
            try:
                _loaded[key] = _LOADERS[kind](str(root), device, memory_share)
            except ModelError:
                raise
            except Exception as exc:  # the model's fault, reported as the grader's error with the cause
                raise ModelError(
                    f"cannot load {kind} model {str(root)!r}: {type(exc).__name__}: {exc}"
                ) from exc
        return _loaded[key]


def _reward(root: str, device: str, memory_share: float) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(root)
    model: Any = AutoModelForSequenceClassification.from_pretrained(root, dtype=torch.float32)
    model = model.to(device).eval()
    if model.config.num_labels != 1:
        raise ModelError(
            f"reward model {root!r} has {model.config.num_labels} outputs; a reward model has one (num_labels=1)"
        )
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return model, tokenizer


def _causal(root: str, device: str, memory_share: float) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(root)
    model: Any = AutoModelForCausalLM.from_pretrained(root, dtype=torch.float32)
    model = model.to(device).eval()
    return model, tokenizer


def _vllm(root: str, device: str, memory_share: float) -> Any:
    from vllm import LLM

    if device == "cpu":
        remember_isa_checks()  # ~10 s of every CPU engine start (reasoning_rl.inductor_isa)
    return LLM(model=root, seed=0, enforce_eager=True, gpu_memory_utilization=memory_share)


_LOADERS = {"reward": _reward, "causal": _causal, "vllm": _vllm}
