"""End-to-end LoRA runs (``model.lora``): GRPO with adapters learns like full fine-tuning on the learning task,
its merged weights reach vLLM through the freshness gate every step, its checkpoints hold only the adapters and
resume exactly after a SIGKILL, and both export forms load and generate the trainer's tokens."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.test_train_e2e import config, kill_at, metrics, rrl, train, weights

pytestmark = [pytest.mark.slow]

# The tiny model with a larger init std stands in for a pretrained base: with HF's 0.02 its logits are nearly
# uniform whatever the hidden state, so only training the (tied) embeddings can learn, which LoRA never touches.
INIT_STD = 0.2
LORA = {"lora": {"rank": 8}}
FULL_LR, LORA_LR = 0.01, 0.1  # LoRA at 10x the full fine-tuning learning rate (docs/lora.md)


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from reasoning_rl.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("lora_base"), initializer_range=INIT_STD)


def _config(tmp_path: Path, model: Path, name: str, *, lora: bool, **sections: Any) -> Path:
    import yaml

    path = config(tmp_path, model, name, **sections)
    cfg = yaml.safe_load(path.read_text())
    if lora:
        cfg["model"].update(LORA)
    path.write_text(yaml.safe_dump(cfg))
    return path


def _held_out(tmp_path: Path) -> Path:
    """Prompts the training data never has ("Say N" with N > 99): the same answer, new inputs."""
    path = tmp_path / "held_out.jsonl"
    rows = [
        {"question": f"Say {100 + 7 * i}", "answer": "7", "data_source": "fixed_digit"} for i in range(16)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _final_eval(run: Path) -> float:
    return float([r for r in metrics(run) if "eval/mean_score" in r][-1]["eval/mean_score"])


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _generate(model: Any, prompts: list[list[int]]) -> list[list[int]]:
    import torch

    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor(prompts), max_new_tokens=8, do_sample=False, use_cache=True
        )
    return [list(map(int, row)) for row in out]


@pytest.mark.vllm
def test_lora_grpo_learns_like_full_finetuning_and_exports_both_forms(
    tmp_path: Path, base_model: Path
) -> None:
    """Same task, seed (run.seed=0), steps and sampling; held-out greedy accuracy of LoRA >= 0.9x full FT's.
    A broken adapter path (no gradient, a hand-off that misses the adapters) stays near the start (~0.1)."""
    common = {
        "data": {"val": [{"path": str(_held_out(tmp_path))}]},
        "eval": {"n": 1, "temperature": 0.0},
        "rollout": {"n": 16, "max_tokens": 6},
    }
    steps = {"steps": 8, "batch_size": 4, "checkpoint_every": 8}
    full = _config(tmp_path, base_model, "full", lora=False, optim={"lr": FULL_LR}, trainer=steps, **common)
    lora = _config(tmp_path, base_model, "lora", lora=True, optim={"lr": LORA_LR}, trainer=steps, **common)
    train(full, timeout=600)
    train(lora, "trainer.export=true", timeout=600)
    full_acc, lora_acc = _final_eval(tmp_path / "full"), _final_eval(tmp_path / "lora")
    print(f"held-out accuracy after 8 steps: full fine-tuning {full_acc:.3f}, LoRA r=8 {lora_acc:.3f}")
    assert full_acc >= 0.9 and lora_acc >= 0.9 * full_acc

    rows = [r for r in metrics(tmp_path / "lora") if "reward/mean" in r]
    assert len(rows) == 8
    for r in rows:  # the merged weights reached vLLM every step, proven by the gate and the sampled log-probs
        assert r["handoff/probe_gap"] <= r["handoff/probe_tol"] and r["rollout/logprob_diff_max"] < 1e-3
        assert r["policy/adapter_norm"] > 0
    ckpt = tmp_path / "lora" / "checkpoints" / "step_8"
    saved = weights(ckpt)
    assert saved and all(".lora_" in k for k in saved)  # the adapters only, no base weight
    lora_bytes = _dir_bytes(ckpt / "policy")
    full_bytes = _dir_bytes(tmp_path / "full" / "checkpoints" / "step_8" / "policy")
    print(f"policy checkpoint: LoRA {lora_bytes} B, full fine-tuning {full_bytes} B")
    assert lora_bytes < full_bytes / 2

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from reasoning_rl.trainer.export import export_checkpoint

    rrl("export", str(tmp_path / "lora"), "--adapter", "-o", str(tmp_path / "adapter"))
    export_checkpoint(
        tmp_path / "lora", out=tmp_path / "merged"
    )  # `rrl export`'s merged form, in this process
    prompts = [[10, 11, 12, 13], [20, 30, 40, 50]]
    trainer = _generate(
        AutoModelForCausalLM.from_pretrained(tmp_path / "lora" / "export" / "step_8"), prompts
    )
    adapter = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base_model), tmp_path / "adapter"
    )
    assert _generate(adapter, prompts) == trainer
    assert _generate(AutoModelForCausalLM.from_pretrained(tmp_path / "merged"), prompts) == trainer
    assert _generate(AutoModelForCausalLM.from_pretrained(base_model), prompts) != trainer

    # rrl eval takes the adapter dir as a model (merged once); same greedy answers as the run's own eval
    held_out = str(tmp_path / "held_out.jsonl")
    out = tmp_path / "adapter_eval.jsonl"
    grader = "data.default_grader=task_graders:ContainsAnswer"
    rrl(
        "eval",
        "--model",
        str(tmp_path / "adapter"),
        "--data",
        held_out,
        "-o",
        str(out),
        "rollout.engine=hf",
        grader,
    )
    scores = [json.loads(line)["mean_score"] for line in out.read_text().splitlines()]
    assert sum(scores) / len(scores) == pytest.approx(lora_acc)


def test_lora_resume_after_kill_matches_uninterrupted(tmp_path: Path, base_model: Path) -> None:
    """SIGKILL writing the second checkpoint (step 6's), resume from step 4's: the adapters at the last step equal
    the uninterrupted run's (test_train_e2e's shape; 12 steps resumed from step 4's ran 14 steps more for the same
    check)."""
    import torch

    common = {
        "rollout": {"engine": "hf", "n": 8, "max_tokens": 6},
        "optim": {"lr": LORA_LR},
        "algorithm": {"old_logprobs": "recompute", "kl_coef": 0.05},  # the base as reference, resumed too
        "trainer": {
            "steps": 6,
            "batch_size": 4,
            "checkpoint_every": 4,
            "checkpoint_minutes": 0,
            "keep_checkpoints": 3,
        },
    }
    train(_config(tmp_path, base_model, "whole", lora=True, **common))
    cut = _config(tmp_path, base_model, "cut", lora=True, **common)
    kill_at(cut, "checkpoint:2")  # a named point, not a race with the run's end
    out = train(cut, "trainer.resume=auto")
    assert f"resumed from {tmp_path / 'cut' / 'checkpoints' / 'step_4'}" in out.stdout
    a = weights(tmp_path / "whole" / "checkpoints" / "step_6")
    b = weights(tmp_path / "cut" / "checkpoints" / "step_6")
    assert a.keys() == b.keys() and all(".lora_" in k for k in a)
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)
