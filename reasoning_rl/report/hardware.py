"""Peak dense bf16 FLOP/s of known accelerators and the model FLOPs per trained token, for MFU."""

from __future__ import annotations

from typing import Any

# Dense (no sparsity) bf16 tensor-core peaks from the vendors' datasheets, per device. Matched by substring
# of the lower-cased device name; more specific names first.
PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    ("gh200", 989e12),
    ("h200", 989e12),
    ("h100 pcie", 756e12),
    ("h100", 989e12),
    ("h800", 989e12),
    ("b200", 2250e12),
    ("a100", 312e12),
    ("a800", 312e12),
    ("l40s", 362e12),
    ("l4", 121e12),
    ("v100", 125e12),
    ("t4", 65e12),
    ("mi300x", 1307e12),
)


def peak_flops(meta: dict[str, Any], override_tflops: float | None = None) -> tuple[float | None, str]:
    """(peak FLOP/s per device, where it came from); ``None`` with the reason when unknown or on CPU."""
    if override_tflops:
        return override_tflops * 1e12, "--peak-tflops"
    if meta.get("peak_flops"):
        return float(meta["peak_flops"]), "trace meta peak_flops"
    device = f"{meta.get('device_name') or ''} {meta.get('device') or ''}".strip().lower()
    if not device:
        return None, "MFU n/a: the trace does not name the device (pass --peak-tflops)"
    if "cpu" in device and "cuda" not in device:
        return None, "MFU n/a on CPU (no meaningful peak FLOP/s)"
    if device == "cuda":
        return None, "MFU n/a: the trace meta names no GPU model (device_name); pass --peak-tflops"
    for key, flops in PEAK_FLOPS:
        if key in device:
            return flops, f"datasheet peak for {key.upper()} (dense bf16)"
    return None, f"MFU n/a: unknown device {device!r} (pass --peak-tflops)"


def model_params(meta: dict[str, Any]) -> int | None:
    """Parameter count from the trace meta, or estimated from the shape (12·L·h² + V·h) when only that is known."""
    model = meta.get("model") or {}
    if model.get("params"):
        return int(model["params"])
    layers, hidden, vocab = model.get("layers"), model.get("hidden"), model.get("vocab")
    if layers and hidden and vocab:
        return int(12 * layers * hidden**2 + vocab * hidden)
    return None


def train_flops(params: int, tokens: float) -> float:
    """Forward + backward ≈ 6 FLOPs per parameter per token (Kaplan et al.)."""
    return 6.0 * params * tokens
