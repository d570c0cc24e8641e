"""A prompt template or system prompt the user set reaches every row it can apply to, verl chat rows included,
or the row is refused with the reason; ``--dry-run`` shows the first prompt of each source as rendered
(issue 30 item 1: examples/math_tir's instruction to write ```python blocks was silently dropped)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reasoning_rl.cli.app import app
from reasoning_rl.config import DataConfig, SourceConfig, load_config
from reasoning_rl.data import DataError, load_examples

REPO = Path(__file__).resolve().parents[2]
TIR = REPO / "examples" / "math_tir" / "config.yaml"
INSTRUCTION = "Write a Python program that prints the answer."


def rows_file(tmp_path: Path, *prompts: object) -> SourceConfig:
    path = tmp_path / "v.jsonl"
    path.write_text(
        "".join(
            json.dumps({"prompt": p, "ability": "math", "reward_model": {"ground_truth": "1"}}) + "\n"
            for p in prompts
        )
    )
    return SourceConfig(path=str(path))


def test_template_formats_the_last_user_message_of_verl_rows(tmp_path: Path) -> None:
    chat = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "What is 1?"},
    ]
    cfg = DataConfig(train=[SourceConfig(generator="arithmetic")], prompt_template="{question} ({ability})")
    ex = load_examples([rows_file(tmp_path, chat, "As text?")], cfg, seed=0)
    assert [m["content"] for m in ex[0].messages] == ["first", "ok", "What is 1? (math)"]
    assert ex[1].messages[-1]["content"] == "As text? (math)"
    plain = load_examples([rows_file(tmp_path, chat)], DataConfig(train=cfg.train), seed=0)
    assert plain[0].messages[-1]["content"] == "What is 1?"  # the default template leaves rows as they are


def test_rows_a_set_template_or_system_prompt_cannot_reach_are_refused(tmp_path: Path) -> None:
    train = [SourceConfig(generator="arithmetic")]
    own_system = [{"role": "system", "content": "mine"}, {"role": "user", "content": "q"}]
    with pytest.raises(
        DataError, match=r"v.jsonl:row 1: data.system_prompt is set but this row has its own system"
    ):
        load_examples(
            [rows_file(tmp_path, own_system)], DataConfig(train=train, system_prompt="Be brief."), seed=0
        )
    assert load_examples([rows_file(tmp_path, own_system)], DataConfig(train=train), seed=0)[0].messages[
        0
    ] == {
        "role": "system",
        "content": "mine",
    }
    no_user = [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]
    with pytest.raises(DataError, match="prompt_template is set but this row's prompt has no user message"):
        load_examples(
            [rows_file(tmp_path, no_user)], DataConfig(train=train, prompt_template="{question}!"), seed=0
        )


def test_math_tir_rows_carry_the_tool_instruction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    cfg = load_config(TIR)
    examples = load_examples(cfg.data.train, cfg.data, seed=0)
    assert examples and all(e.messages[-1]["content"].endswith(INSTRUCTION) for e in examples)
    assert all(
        e.messages[0]["role"] == "system" and "```python" in e.messages[0]["content"] for e in examples
    )


@pytest.mark.slow
def test_dry_run_prints_the_first_rendered_prompt_of_each_source(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    res = CliRunner().invoke(
        app, ["train", str(TIR), "--dry-run", f"model.path={tiny_model_dir}", "run.doctor=false"]
    )
    assert res.exit_code == 0, res.output
    assert "first prompt of gsm8k_style" in res.stdout
    shown = "".join(res.stdout.split())  # the tiny test tokenizer has no space token: compare without spaces
    assert "".join(INSTRUCTION.split()) in shown and "writea```pythoncodeblock" in shown


@pytest.mark.slow
def test_a_refused_row_is_at_most_three_lines_no_traceback(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    own = rows_file(tmp_path, [{"role": "system", "content": "mine"}, {"role": "user", "content": "q"}])
    res = CliRunner().invoke(
        app,
        ["train", str(TIR), "--dry-run", f"model.path={tiny_model_dir}", "run.doctor=false"]
        + [f"data.train=[{{path: '{own.path}'}}]"],
    )
    assert res.exit_code == 2 and "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) <= 3 and "has its own system message" in res.stderr
