from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import graders
from graders import Grade


def test_grade_validates_its_fields() -> None:
    assert Grade.correct("ok").score == 1.0
    with pytest.raises(ValueError, match="verdict"):
        Grade(1.0, "maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="score"):
        Grade(1.5, "correct")
    g = Grade.error("timeout", elapsed_s=2.0)
    assert Grade.from_dict(g.to_dict()) == g


def test_unknown_grader_lists_available_ones() -> None:
    with pytest.raises(graders.UnknownGraderError) as info:
        graders.grade("no-such-grader", "x", "y")
    message = str(info.value)
    assert "no-such-grader" in message
    for name in ("math", "code", "lean"):
        assert name in message


def test_register_in_process_grader() -> None:
    class Echo:
        name = "echo-test"
        version = "1"

        def grade(self, response: str, ground_truth: object, **options: object) -> Grade:
            return Grade.correct() if response == ground_truth else Grade.incorrect("differs")

    graders.register(Echo())
    try:
        assert graders.grade("echo-test", "a", "a").verdict == "correct"
        assert graders.grade("echo-test", "a", "b").reason == "differs"
        assert "echo-test" in graders.available()
        with pytest.raises(ValueError, match="already registered"):
            graders.register(Echo())
    finally:
        graders.unregister("echo-test")


def test_cli_version_and_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "reasoning_rl.cli", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("rrl ")
    out = subprocess.run([sys.executable, "-m", "reasoning_rl.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "Usage" in out.stdout


def test_grading_side_does_not_import_torch() -> None:
    code = "import sys, graders, sandboxes; graders.available(); assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_tiny_model_loads_and_chats(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = "2+3=\\boxed{5}"
    assert tok.decode(tok(text)["input_ids"]) == text
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)[
        "input_ids"
    ]
    assert tok.decode(ids).endswith("<|assistant|>")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.config.num_hidden_layers == 2
