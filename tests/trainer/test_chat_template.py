"""``data.chat_template``: true/false, or a Jinja template given inline or as a file (issue 19)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reasoning_rl.config import SourceConfig, load_config
from reasoning_rl.data import DataError, load_examples, render_all
from tests.trainer.test_train_e2e import config

TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)


@pytest.fixture
def tok(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _rendered(tok, tmp_path: Path, *overrides: str) -> str:  # type: ignore[no-untyped-def]
    cfg = load_config(config(tmp_path, tmp_path, "t"), [*overrides, "data.system_prompt=Be brief."])
    examples = load_examples([SourceConfig(generator="fixed_digit", size=1)], cfg.data, seed=0)
    prompts, _ = render_all(
        tok, examples, chat_template=cfg.data.chat_template, max_prompt_tokens=4096, skip_long=False
    )
    return "".join(
        tok.convert_ids_to_tokens(prompts[0].token_ids)
    )  # the tiny char tokenizer has no whitespace tokens


def test_inline_template_from_an_unquoted_override(tok, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    text = _rendered(tok, tmp_path, f"data.chat_template={TEMPLATE}")
    assert text.startswith("[system]Bebrief.[user]Say") and text.endswith("[assistant]")
    assert "<|user|>" not in text  # not the tokenizer's own template


def test_template_file_and_the_booleans(tok, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "chat.jinja").write_text(TEMPLATE)
    assert _rendered(tok, tmp_path, f"data.chat_template={tmp_path / 'chat.jinja'}").endswith("[assistant]")
    own = _rendered(tok, tmp_path, "data.chat_template=true")
    assert own.startswith("<|system|>Bebrief.<|end|><|user|>") and own.endswith("<|assistant|>")
    assert _rendered(tok, tmp_path, "data.chat_template=false").startswith("Bebrief.Say")


def test_a_template_works_for_a_tokenizer_without_one(tok, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tok.chat_template = None
    assert _rendered(tok, tmp_path, f"data.chat_template={TEMPLATE}").endswith("[assistant]")
    with pytest.raises(DataError, match="set data.chat_template to a Jinja template"):
        _rendered(tok, tmp_path, "data.chat_template=true")


def test_bad_templates_name_the_key(tok, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DataError, match="neither an existing file nor a Jinja template"):
        _rendered(tok, tmp_path, f"data.chat_template={tmp_path / 'missing.jinja'}")
    with pytest.raises(DataError, match="data.chat_template: TemplateSyntaxError"):
        _rendered(tok, tmp_path, "data.chat_template={% for m in messages %}{{ m['content'] }}")
