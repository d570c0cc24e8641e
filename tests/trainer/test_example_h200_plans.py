"""The examples' READMEs quote the memory plan `rrl train CONFIG --dry-run --plan-for h200` prints for one H200
(issue 47 follow-up: they were made by an ad-hoc script and could drift). Each README that quotes an H200 plan
names that command, and its update micro-batch and engine figures are what the command prints for that config
today, as is the examples table's summary (k tokens, engine GiB).

The configs name hub models (or `make demo`'s conversion) that CI lacks, so `model.path` is a stand-in directory
of the real shape: the published config.json (reasoning_rl/model_shapes.py, saved by transformers' config class)
with the tiny test model's tokenizer; the READMEs say so. The plan reads only the shape and the prompt lengths."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reasoning_rl import model_shapes
from reasoning_rl.cli.app import app

REPO = Path(__file__).resolve().parents[2]
# example -> the model shape its README plans for
SHAPES = {
    "qwen15_grpo": "QWEN25_1_5B",
    "qwen7b_lora": "QWEN25_7B",
    "continuous_grpo": "SMOLLM2_135M",
    "lora_grpo": "SMOLLM2_135M",
    "trl_reward_function": "SMOLLM2_135M",
    "verl_compute_score": "SMOLLM2_135M",
}
runner = CliRunner()


def shape_dir(shape: str, tokenizer_dir: Path, out: Path) -> Path:
    """A model dir holding ``shape``'s config.json (Qwen2 / Llama, as the models are) and the tokenizer files of
    ``tokenizer_dir``: what `--plan-for` needs, no weights."""
    from transformers import LlamaConfig, Qwen2Config

    cls, positions = (LlamaConfig, 8192) if shape.startswith("SMOLLM2") else (Qwen2Config, 32768)
    out.mkdir(parents=True, exist_ok=True)
    cls(max_position_embeddings=positions, **dict(getattr(model_shapes, shape))).save_pretrained(out)
    for f in tokenizer_dir.iterdir():
        if "token" in f.name or f.name.endswith(".jinja"):
            shutil.copy(f, out / f.name)
    return out


def figures(text: str) -> tuple[int, float]:
    """The update's micro-batch tokens and the engine's GiB of the first plan quoted in ``text``."""
    micro = re.search(r"update peak [\d.]+ GiB at micro_batch_tokens=(\d+)", text)
    engine = re.search(r"memory plan: engine ([\d.]+) GiB", text)
    assert micro and engine, "no `memory plan:` update and engine lines"
    return int(micro.group(1)), float(engine.group(1))


def test_every_readme_that_quotes_an_h200_plan_is_checked() -> None:
    quoting = {
        p.parent.name
        for p in (REPO / "examples").glob("*/README.md")
        if "H200" in p.read_text() and "micro_batch_tokens=" in p.read_text()
    }
    assert quoting == set(SHAPES)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_readme_h200_plan_is_what_plan_for_h200_prints(
    name: str, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readme = (REPO / "examples" / name / "README.md").read_text()
    command = f"rrl train examples/{name}/config.yaml --dry-run --plan-for h200"
    assert command in readme, f"examples/{name}/README.md does not name `{command}`"
    monkeypatch.chdir(REPO)
    model = shape_dir(SHAPES[name], tiny_model_dir, tmp_path / "model")
    args = [*command.split()[1:], f"model.path={model}", f"run.dir={tmp_path / 'run'}"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    micro, engine = figures(out)
    assert figures(" ".join(readme.split())) == (micro, engine), (
        f"examples/{name}/README.md quotes another plan than `{command}` prints now: {out}"
    )
    assert f"largest micro-batch on h200: micro_batch_tokens={micro} per training rank" in out
    # the examples table: "update micro-batch 249k tokens, engine 3.1 GiB" (the function examples say "as math_grpo")
    table = (REPO / "examples/README.md").read_text().splitlines()
    row = next(line for line in table if f"`{name}/`" in line)
    summary = re.search(r"update micro-batch (\d+)k tokens.*?engine ([\d.]+) GiB", row)
    if summary is not None or name not in ("trl_reward_function", "verl_compute_score"):
        assert summary is not None, row
        assert (int(summary.group(1)), float(summary.group(2))) == (round(micro / 1000), engine), row


def test_the_examples_let_the_plan_size_the_engine() -> None:
    """Issue 45: the plan sizes vLLM's share and KV cache to what a step asks (a fixed 0.35 of an H200 was 49 GiB
    for a 14 GiB engine); no example fixes rollout.gpu_memory_utilization."""
    import yaml

    fixed = [
        p.parent.name
        for p in sorted((REPO / "examples").glob("*/config.yaml"))
        if "gpu_memory_utilization" in (yaml.safe_load(p.read_text()).get("rollout") or {})
    ]
    assert fixed == []
