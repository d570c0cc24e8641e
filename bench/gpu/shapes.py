"""Model shapes shared by the GPU benchmarks (the same ones TRL was measured on) and a random-init builder."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The package from this source tree: verl's environment runs these scripts without installing it (appended, so
# nothing of the tree shadows an installed package there).
sys.path.append(str(Path(__file__).resolve().parents[2]))
from reasoning_rl.model_shapes import QWEN25_0_5B, QWEN25_1_5B, SMOLLM2_135M, TINY  # noqa: E402

SHAPES: dict[str, Mapping[str, int]] = {
    "smol": SMOLLM2_135M,
    "qwen": QWEN25_0_5B,
    "qwen15": QWEN25_1_5B,  # Qwen2.5-1.5B / DeepSeek-R1-Distill-Qwen-1.5B
    "tiny": TINY,
}


def build_random_model(shape: str, out_dir: str | Path, seed: int = 0, max_positions: int = 2048) -> Path:
    """A random-init Llama of ``shape`` + a WordLevel tokenizer over tokens ``t0..tV`` (as in TRL's bench), for
    sequences of up to ``max_positions`` tokens."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    if (out / "config.json").is_file():
        return out
    spec: dict[str, Any] = dict(SHAPES[shape])  # LlamaConfig takes mixed-type keywords
    write_tokenizer(out, spec["vocab_size"])
    cfg = LlamaConfig(  # every shape here ties its embeddings (param_count counts them once)
        max_position_embeddings=max_positions,
        bos_token_id=2,
        eos_token_id=1,
        **spec,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(cfg).save_pretrained(out)
    return out


def write_tokenizer(out: Path, vocab_size: int, whole_words: bool = False) -> None:
    """TRL's bench tokenizer in ``out``: a word-level vocabulary ``t0..tV`` (t0 pad/unk, t1 EOS, t2 BOS). As in
    TRL's bench, its special tokens match inside words ("t180" -> t1, unk): the anchor's prompts are tokenised
    so on both sides. ``whole_words``: they match whole words only, so n words are exactly n tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")

    def special(text: str) -> AddedToken | str:
        return AddedToken(text, single_word=True, special=True) if whole_words else text

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=special("t0"),
        pad_token=special("t0"),
        eos_token=special("t1"),
        bos_token=special("t2"),
    )
    fast.save_pretrained(out)


def random_prompts(vocab: int, count: int, length: int, seed: int = 1) -> list[str]:
    """The benchmark's prompt texts: ``count`` rows of ``length`` random tokens ``t3..tV`` (TRL's bench draws the
    same ones: torch seed 1), shared by ours, TRL and verl so all three see the same text."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return [
        " ".join(f"t{int(x)}" for x in torch.randint(3, vocab, (length,), generator=g)) for _ in range(count)
    ]


def param_count(shape: str) -> int:
    """Parameters of ``shape`` (tied embeddings), for FLOP counts."""
    s = SHAPES[shape]
    h, i, layers, v = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"], s["vocab_size"]
    head = h // s["num_attention_heads"]
    kv = s["num_key_value_heads"] * head
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h
    return layers * per_layer + v * h + h


def train_flops(shape: str, tokens: int, seq_len: int) -> float:
    """fwd+bwd FLOPs: 6·N·tokens (dense) + 12·layers·hidden·seq·tokens (causal attention, halved)."""
    s: dict[str, Any] = SHAPES[shape]
    return (
        6.0 * param_count(shape) * tokens + 6.0 * s["num_hidden_layers"] * s["hidden_size"] * seq_len * tokens
    )
