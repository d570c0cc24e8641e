"""SFT rows -> tokens and loss mask: the assistant's tokens only (by hand on a 2-turn example with system,
user and tool turns), the row formats (chat, prompt/response, verl's nested SFT columns, parquet), and bad
input as one line naming the row: no assistant turn, over max length (truncated or dropped, counted), an
empty split."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from rich.console import Console  # noqa: E402

from reasoning_rl.config import DataConfig, SftConfig, load_config  # noqa: E402
from reasoning_rl.data import DataError  # noqa: E402
from reasoning_rl.data.sft import SftReport, load_sft_rows, tokenize_conversation  # noqa: E402

SPECIALS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<eos>")


def by_hand(pieces: list[tuple[str, int]]) -> tuple[list[str], list[int]]:
    """The tiny tokenizer's tokens of ``pieces`` written out: a special token is one token, any other
    character one token; each token carries its piece's mask."""
    tokens, mask = [], []
    for text, trained in pieces:
        units = [text] if text in SPECIALS else list(text)
        tokens += units
        mask += [trained] * len(units)
    return tokens, mask


@pytest.fixture(scope="module")
def tok(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_loss_mask_covers_assistant_tokens_only(tok: Any) -> None:
    messages = [
        {"role": "system", "content": "be-brief"},
        {"role": "user", "content": "add:5+7"},
        {"role": "assistant", "content": "12"},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": "3"},
    ]
    ids, mask = tokenize_conversation(tok, messages, chat_template=True, append_eos=True, where="t")
    tokens, expected = by_hand(
        [
            ("<|system|>", 0), ("be-brief", 0), ("<|end|>", 0),
            ("<|user|>", 0), ("add:5+7", 0), ("<|end|>", 0),
            ("<|assistant|>", 0), ("12", 1), ("<|end|>", 1),
            ("<|tool|>", 0), ("ok", 0), ("<|end|>", 0),
            ("<|assistant|>", 0), ("3", 1), ("<|end|>", 1), ("<eos>", 1),
        ]
    )  # fmt: skip
    assert tok.convert_ids_to_tokens(ids) == tokens
    assert mask == expected


def test_plain_text_rows_mask_the_response(tok: Any) -> None:
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ab"}]
    ids, mask = tokenize_conversation(tok, messages, chat_template=False, append_eos=False, where="t")
    assert tok.convert_ids_to_tokens(ids) == ["q", "a", "b"]  # this tokenizer drops whitespace
    assert mask == [0, 1, 1]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def load(path: Path, tok: Any, **sft: Any) -> tuple[list[Any], SftReport]:
    data = DataConfig(train=[{"path": str(path)}], **sft.pop("data", {}))
    report = SftReport()
    rows = load_sft_rows(data.train, data, SftConfig(**sft), tok, seed=0, report=report)
    return rows, report


def test_prompt_response_and_verl_nested_columns(tmp_path: Path, tok: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    flat = write_jsonl(tmp_path / "pr.jsonl", [{"prompt": "hi", "response": "yo"}])
    (row,) = load(flat, tok)[0]
    assert "".join(t for t, m in zip(tok.convert_ids_to_tokens(row.ids), row.mask, strict=True) if m) == (
        "yo<|end|><eos>"
    )
    nested = tmp_path / "verl.parquet"
    pq.write_table(pa.Table.from_pylist([{"extra_info": {"question": "hi", "answer": "yo"}}]), nested)
    (same,) = load(nested, tok, prompt_key="extra_info.question", response_key="extra_info.answer")[0]
    assert (same.ids, same.mask) == (row.ids, row.mask)


def test_row_without_assistant_turn_is_one_line_naming_it(tmp_path: Path, tok: Any) -> None:
    good = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    bad = {"messages": [{"role": "user", "content": "a"}]}
    path = write_jsonl(tmp_path / "rows.jsonl", [good, bad, good])
    with pytest.raises(DataError, match=r"rows.jsonl:row 2: no assistant turn"):
        load(path, tok)
    rows, report = load(path, tok, data={"on_bad_row": "skip"})
    assert len(rows) == 2 and len(report.skipped) == 1 and "row 2" in report.skipped[0]


def test_long_rows_are_truncated_or_dropped_and_counted(tmp_path: Path, tok: Any) -> None:
    rows = [{"prompt": "q", "response": "x" * 40}, {"prompt": "q", "response": "y"}]
    path = write_jsonl(tmp_path / "long.jsonl", rows)
    kept, report = load(path, tok, max_length=20)
    assert [len(r.ids) for r in kept] == [20, len(kept[1].ids)] and report.truncated == 1
    kept, report = load(path, tok, max_length=20, on_long="drop")
    assert len(kept) == 1 and report.dropped_long == 1 and report.truncated == 0
    # truncated inside the prompt: no assistant token left, so the row is dropped (and counted), never kept
    kept, report = load(
        write_jsonl(tmp_path / "p.jsonl", [{"prompt": "p" * 30, "response": "y"}, rows[1]]),
        tok,
        max_length=20,
    )
    assert len(kept) == 1 and report.dropped_long == 1


def test_empty_split_is_one_line(tmp_path: Path, tiny_model_dir: Path, tok: Any) -> None:
    from reasoning_rl.trainer.sft_data import load_sft_data

    path = write_jsonl(tmp_path / "few.jsonl", [{"prompt": "q", "response": "a"}] * 3)
    cfg = load_config(
        None,
        [],
        base={
            "model": {"path": str(tiny_model_dir)},
            "data": {"train": str(path)},
            "sft": {"val_fraction": 0.1},
        },
    )
    with pytest.raises(
        DataError, match=r"sft.val_fraction=0.1 of 3 training rows leaves an empty eval split"
    ):
        load_sft_data(cfg, tok, Console(quiet=True))
    all_long = write_jsonl(tmp_path / "long.jsonl", [{"prompt": "q", "response": "x" * 40}])
    with pytest.raises(DataError, match="has no usable SFT rows"):
        load(all_long, tok, max_length=10, on_long="drop")


def test_rrl_sft_bad_row_is_one_line_exit_2(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from reasoning_rl.cli.sft import sft_command

    path = write_jsonl(tmp_path / "rows.jsonl", [{"messages": [{"role": "user", "content": "a"}]}])
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "run": {"dir": str(tmp_path / "run"), "doctor": False},
                "model": {"path": str(tiny_model_dir)},
                "data": {"train": str(path)},
                "logging": {"console": "none", "tensorboard": False},
            }
        )
    )
    assert sft_command(str(cfg), []) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("error: ") and "rows.jsonl:row 1: no assistant turn" in err[0]
    assert len(err) == 2 and "data.on_bad_row=skip" in err[1]  # the line and how to skip such rows


def test_rrl_sft_shares_rrl_train_s_prologue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One prologue (``cli.common.run_config``) for both commands: torchrun refused naming the command,
    --print-config the resolved YAML, a config mistake one line (before, sft repeated train's code)."""
    from reasoning_rl.cli.sft import sft_command

    cfg = tmp_path / "sft.yaml"
    cfg.write_text("model: {path: m}\ndata: {train: rows.jsonl}\n")
    assert sft_command(str(cfg), [], print_config=True) == 0
    assert "path: m" in capsys.readouterr().out
    assert sft_command(str(cfg), ["sft.epocs=2"]) == 2
    assert "sft.epocs" in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert sft_command(str(cfg), []) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "rrl sft runs as a single training process" in err and "Run `rrl sft CONFIG` once" in err
