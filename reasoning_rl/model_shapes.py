"""The published shapes of the models that benchmarks and tests stand in for with random weights, defined once.

Each is the part of the model's HF ``config.json`` that decides parameters, FLOPs and memory (read-only; copy
with ``dict(QWEN25_1_5B, max_position_embeddings=...)`` to add keys). The GPU benchmarks build random-init
models of these sizes; the memory plan's tests check their parameter counts against the published ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType


def _shape(**keys: int) -> Mapping[str, int]:
    return MappingProxyType(keys)


SMOLLM2_135M = _shape(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    tie_word_embeddings=True,
)
QWEN25_0_5B = _shape(
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    tie_word_embeddings=True,
)
QWEN25_1_5B = _shape(  # also Qwen2.5-Math-1.5B and DeepSeek-R1-Distill-Qwen-1.5B
    vocab_size=151936,
    hidden_size=1536,
    intermediate_size=8960,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
    tie_word_embeddings=True,
)
QWEN25_7B = _shape(  # also Qwen2.5-Math-7B and DeepSeek-R1-Distill-Qwen-7B
    vocab_size=152064,
    hidden_size=3584,
    intermediate_size=18944,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    tie_word_embeddings=False,
)
# The CPU smoke runs' stand-in: tiny.build_tiny_model's layer sizes with a 512-token vocabulary.
TINY = _shape(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    tie_word_embeddings=True,
)
