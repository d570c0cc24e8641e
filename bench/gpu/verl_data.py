"""verl's inputs for the TRL-anchor workload, written where ``verl_runs.py`` points verl.

    python3 bench/gpu/verl_data.py [SHAPE] [ROOT]      # default: qwen /tmp/verl_bench

Writes ROOT/model (the same random-init model ours and TRL train: ``shapes.build_random_model``, plus a chat
template that only concatenates, since verl always applies one), ROOT/train.parquet and ROOT/val.parquet (the
same prompt text as ours and TRL: ``shapes.random_prompts``) and ROOT/reward.py (verl's ``compute_score``
signature; as cheap as TRL's length-based reward, so grading never limits the step).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shapes import SHAPES, build_random_model, random_prompts  # noqa: E402

PROMPTS, PROMPT_LEN, STEPS = 32, 128, 8  # rows for STEPS + 1 batches of 32 prompts
MAX_PROMPT_TOKENS = 256  # verl_runs.py passes data.max_prompt_length=256
REWARD = '''def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Deterministic and cheap: the length of the completion text modulo 7, scaled to [0, 1)."""
    return float(len(solution_str) % 7) / 7.0
'''


def main() -> None:
    shape = sys.argv[1] if len(sys.argv) > 1 else "qwen"
    root = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/verl_bench")
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    model = build_random_model(shape, root / "model")
    tok = AutoTokenizer.from_pretrained(model)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tok.save_pretrained(model)
    texts = random_prompts(SHAPES[shape]["vocab_size"], PROMPTS * (STEPS + 1), PROMPT_LEN)
    rows = [
        {
            "data_source": "rand",
            "prompt": [{"role": "user", "content": text}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "0"},
            "extra_info": {"index": i},
        }
        for i, text in enumerate(texts)
    ]
    lengths = [
        len(
            tok(
                tok.apply_chat_template(
                    [{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True
                ),
                add_special_tokens=False,
            )["input_ids"]
        )
        for t in texts
    ]
    if (
        max(lengths) > MAX_PROMPT_TOKENS
    ):  # verl's data.truncation=error would stop the run later, less clearly
        raise SystemExit(
            f"verl_data: a prompt is {max(lengths)} tokens, over data.max_prompt_length={MAX_PROMPT_TOKENS}"
        )
    pq.write_table(pa.Table.from_pylist(rows), root / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows[:PROMPTS]), root / "val.parquet")
    (root / "reward.py").write_text(REWARD)
    print(
        f"verl data: {len(rows)} prompts, {statistics.mean(lengths):.1f} tokens on average ({min(lengths)}-"
        f"{max(lengths)}; {PROMPT_LEN} words each: the tokenizer splits off its special tokens t0/t1/t2 inside "
        f"words), model {model}",
        flush=True,
    )


if __name__ == "__main__":
    main()
