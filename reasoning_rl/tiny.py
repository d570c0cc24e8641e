"""A tiny random causal LM with a character-level tokenizer, built fully offline (tests, benchmarks, CI)."""

from __future__ import annotations

import string
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["<pad>", "<eos>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHARS = list(string.digits + string.ascii_letters + string.punctuation + " \n")


def build_tiny_model(
    out_dir: str | Path,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    seed: int = 0,
    tie_word_embeddings: bool = True,
    initializer_range: float = 0.02,
) -> Path:
    """Write a random 2-layer Qwen2 model + char tokenizer to ``out_dir`` (loadable by HF and vLLM).

    ``initializer_range``: the weights' init std; HF's 0.02 gives near-uniform next-token distributions, which
    only training the embeddings themselves can sharpen. A larger one stands in for a pretrained base whose
    hidden states already steer the logits: what LoRA adapters (no embedding update) need to learn at all."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab = {tok: i for i, tok in enumerate(SPECIAL + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    specials = "|".join(s.replace("|", r"\|") for s in SPECIAL)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(f"{specials}|."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        additional_special_tokens=SPECIAL[3:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=512,
        tie_word_embeddings=tie_word_embeddings,
        initializer_range=initializer_range,
        bos_token_id=vocab["<eos>"],
        eos_token_id=vocab["<eos>"],
        pad_token_id=vocab["<pad>"],
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = vocab["<eos>"]
    model.generation_config.pad_token_id = vocab["<pad>"]
    model.save_pretrained(out, safe_serialization=True)
    return out


def build_tiny_reward_model(out_dir: str | Path, *, seed: int = 0, initializer_range: float = 0.5) -> Path:
    """The tiny model with a one-output score head in place of its LM head: a random reward model that
    ``AutoModelForSequenceClassification`` loads (the ``reward_model`` grader's tests and bench). The larger
    init spreads its scores, so different responses score differently."""
    import torch
    from transformers import AutoConfig, Qwen2ForSequenceClassification

    out = build_tiny_model(out_dir, seed=seed, initializer_range=initializer_range)
    config = AutoConfig.from_pretrained(out)
    config.num_labels = 1
    config.architectures = ["Qwen2ForSequenceClassification"]
    torch.manual_seed(seed)
    Qwen2ForSequenceClassification(config).save_pretrained(out, safe_serialization=True)
    return out
