"""Data: both schemas, all source kinds, grader routing, bad rows named by file and row, resumable order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reasoning_rl.config import DataConfig, SourceConfig
from reasoning_rl.data import DataError, LoadReport, PromptSampler, arithmetic, load_examples, render_prompt

VERL_ROW = {
    "data_source": "gsm8k",
    "prompt": [{"role": "user", "content": "1+1?"}],
    "ability": "math",
    "reward_model": {"style": "rule", "ground_truth": "2"},
    "extra_info": {"index": 3},
}
SIMPLE_ROW = {"question": "What is 2+3?", "answer": "5"}


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def data_cfg(**kw) -> DataConfig:
    return DataConfig(train=[SourceConfig(generator="arithmetic")], **kw)


def test_verl_and_simple_schema(tmp_path: Path) -> None:
    src = SourceConfig(path=str(jsonl(tmp_path / "mix.jsonl", [VERL_ROW, SIMPLE_ROW])))
    cfg = data_cfg(prompt_template="Q: {question} Box it.", system_prompt="Be brief.")
    ex = load_examples([src], cfg, seed=0)
    assert ex[0].data_source == "gsm8k" and ex[0].ground_truth == "2" and ex[0].extra_info == {"index": 3}
    assert [m["role"] for m in ex[0].messages] == ["system", "user"]
    assert ex[1].data_source == "mix" and ex[1].ground_truth == "5"
    assert ex[1].messages[-1]["content"] == "Q: What is 2+3? Box it."


def test_grader_routing_explicit_source_ability_default(tmp_path: Path) -> None:
    rows = [
        {**SIMPLE_ROW, "grader": "code"},
        {**SIMPLE_ROW, "data_source": "apps"},
        {**SIMPLE_ROW, "ability": "lean"},
        SIMPLE_ROW,
    ]
    cfg = data_cfg(grader_map={"apps": "code", "lean": "lean"})
    ex = load_examples([SourceConfig(path=str(jsonl(tmp_path / "r.jsonl", rows)))], cfg, seed=0)
    assert [e.grader for e in ex] == ["code", "code", "lean", "math"]


def test_malformed_row_names_file_and_row(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "bad.jsonl", [SIMPLE_ROW, {"question": "no answer"}, "{not json", SIMPLE_ROW])
    with pytest.raises(DataError, match=r"bad.jsonl:row 2: needs a ground truth") as e:
        load_examples([SourceConfig(path=str(path))], data_cfg(), seed=0)
    assert "on_bad_row=skip" in str(e.value)
    report = LoadReport()
    ex = load_examples([SourceConfig(path=str(path))], data_cfg(on_bad_row="skip"), seed=0, report=report)
    assert len(ex) == 2 and len(report.skipped) == 2
    assert "row 3 is not valid JSON" in report.skipped[1]


def test_unknown_grader_and_bad_prompt_errors(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "g.jsonl", [{**SIMPLE_ROW, "grader": "nope"}])
    with pytest.raises(DataError, match=r"g.jsonl:row 1: grader 'nope' is not installed; available: math"):
        load_examples([SourceConfig(path=str(path))], data_cfg(), seed=0, known_graders=frozenset({"math"}))
    path = jsonl(tmp_path / "p.jsonl", [{"prompt": [{"role": "robot", "content": "x"}], "answer": "1"}])
    with pytest.raises(DataError, match=r"p.jsonl:row 1: prompt\[0\].role must be one of"):
        load_examples([SourceConfig(path=str(path))], data_cfg(), seed=0)
    with pytest.raises(DataError, match="does not exist"):
        load_examples([SourceConfig(path=str(tmp_path / "missing.jsonl"))], data_cfg(), seed=0)


def test_parquet_and_saved_dataset_dir(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list([SIMPLE_ROW, {"question": "What is 1+1?", "answer": "2"}])
    ds.to_parquet(str(tmp_path / "d.parquet"))
    ds.save_to_disk(str(tmp_path / "saved"))
    for path in (tmp_path / "d.parquet", tmp_path / "saved"):
        ex = load_examples([SourceConfig(path=str(path), limit=1)], data_cfg(), seed=0)
        assert len(ex) == 1 and ex[0].ground_truth == "5"


def test_generator_is_seeded_and_correct() -> None:
    a, b = arithmetic(50, 3, word_problems=0.5), arithmetic(50, 3, word_problems=0.5)
    assert a == b and a != arithmetic(50, 4, word_problems=0.5)
    for row in a:
        if row["question"].startswith("What is"):
            expr = row["question"][len("What is ") : -1]
            assert str(eval(expr)) == row["answer"]  # noqa: S307 - our own generated expression


def test_sampler_resume_gives_same_order() -> None:
    full = PromptSampler(size=7, seed=1)
    batches = [full.next_batch(3) for _ in range(6)]
    part = PromptSampler(size=7, seed=1)
    for _ in range(4):
        part.next_batch(3)
    resumed = PromptSampler(size=7, seed=1)
    resumed.load_state(part.state())
    assert [resumed.next_batch(3) for _ in range(2)] == batches[4:]
    assert sorted(batches[0] + batches[1] + [batches[2][0]]) == list(range(7))  # an epoch is a permutation
    with pytest.raises(ValueError, match="data changed"):
        PromptSampler(size=8, seed=1).load_state(part.state())


def test_chat_template_rendering(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ex = load_examples([SourceConfig(generator="fixed_digit", size=1)], data_cfg(), seed=0)[0]
    ids = render_prompt(tok, ex, chat_template=True)
    assert tok.decode(ids).endswith("<|assistant|>") and "<|user|>Say" in tok.decode(ids)


def test_reasoning_gym_recipe_rows_load_and_grade(tmp_path: Path) -> None:
    """datasets/recipes/gym_tasks.py: seeded rows that our loader reads and whose answers our grader accepts."""
    import subprocess
    import sys

    import graders

    pytest.importorskip("reasoning_gym")
    recipe = Path(__file__).resolve().parents[2] / "datasets" / "recipes" / "gym_tasks.py"
    out = tmp_path / "gsm.jsonl"
    for path in (out, tmp_path / "again.jsonl"):
        subprocess.run(
            [sys.executable, str(recipe), "gsm_symbolic", str(path), "--size", "5", "--seed", "3"],
            check=True,
            capture_output=True,
            text=True,
        )
    assert out.read_text() == (tmp_path / "again.jsonl").read_text()  # seeded: same rows
    ex = load_examples([SourceConfig(path=str(out))], data_cfg(), seed=0)
    assert len(ex) == 5 and all(e.data_source == "rg_gsm_symbolic" for e in ex)
    assert all(
        graders.grade("math", f"\\boxed{{{e.ground_truth}}}", e.ground_truth).verdict == "correct" for e in ex
    )
    bad = subprocess.run(
        [sys.executable, str(recipe), "gsm_symbolc", str(out)], capture_output=True, text=True
    )
    assert bad.returncode != 0 and "unknown reasoning-gym dataset 'gsm_symbolc'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_decontaminate_recipe_drops_templated_copies_only(tmp_path: Path) -> None:
    """datasets/recipes/decontaminate.py: a test question re-templated into training (names, numbers and items
    swapped, as reasoning-gym's gsm_symbolic does to GSM8K) is dropped; unrelated questions are kept."""
    import subprocess
    import sys

    recipe = Path(__file__).resolve().parents[2] / "datasets" / "recipes" / "decontaminate.py"
    train, test, out, report = (
        tmp_path / n for n in ("train.jsonl", "test.jsonl", "out.jsonl", "report.jsonl")
    )
    train.write_text(
        json.dumps(
            {
                "question": "Liam hid 10 dozen eggs in the yard for the Easter egg hunt. Oliver "
                "finds 14 eggs. Noah finds 2 times as many as Oliver. How many eggs are still "
                "hidden in the yard?",
                "answer": "78",
            }
        )
        + "\n"
    )
    copy = (
        "Cole hid 3 dozen eggs in the yard for the Easter egg hunt. Lamar finds 5 eggs. Stacy finds twice as "
        "many as Lamar. How many eggs are still hidden in the yard?"
    )
    other = "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total does it take?"
    test.write_text(
        json.dumps({"question": copy, "answer": "21"})
        + "\n"
        + json.dumps({"prompt": [{"role": "user", "content": other}], "answer": "3"})
        + "\n"
    )
    proc = subprocess.run(
        [sys.executable, str(recipe), str(train), str(test), str(out), "--report", str(report)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["answer"] for line in out.read_text().splitlines()] == ["3"]
    assert [json.loads(line)["eval"] for line in report.read_text().splitlines()] == [copy]
    assert "kept 1 of 2 rows" in proc.stdout
    test.write_text('{"question": "ok"}\nnot json\n')
    bad = subprocess.run(
        [sys.executable, str(recipe), str(train), str(test), str(out)], capture_output=True, text=True
    )
    assert bad.returncode != 0 and f"{test}:2: not JSON" in bad.stderr and "Traceback" not in bad.stderr
    test.write_text('{"question": "ok"}\n{"answer": "3"}\n')
    bad = subprocess.run(
        [sys.executable, str(recipe), str(train), str(test), str(out)], capture_output=True, text=True
    )
    assert bad.returncode != 0 and f"{test}:2: no 'question'" in bad.stderr and "Traceback" not in bad.stderr


def test_unknown_default_grader_is_named_even_when_skipping_bad_rows(tmp_path: Path) -> None:
    """Before: with on_bad_row=skip every row was skipped for the unknown grader, and the error only said
    'has no usable rows'."""
    path = tmp_path / "rows.jsonl"
    path.write_text('{"question": "1+1?", "answer": "2"}\n')
    data = DataConfig(train=[SourceConfig(path=str(path))], default_grader="mathz", on_bad_row="skip")
    with pytest.raises(
        DataError, match=r"data\.default_grader='mathz' is not an installed grader; available: .*math"
    ):
        load_examples(data.train, data, seed=0, known_graders=frozenset({"math", "code"}))
    data = DataConfig(train=[SourceConfig(path=str(path))], grader_map={"gsm8k": "maht"}, on_bad_row="skip")
    with pytest.raises(DataError, match=r"data\.grader_map\.gsm8k='maht'"):
        load_examples(data.train, data, seed=0, known_graders=frozenset({"math"}))


def test_word_chain_answers_follow_the_story_and_the_recipe_rows_load(tmp_path: Path) -> None:
    """The GPU benches' learning workload: each answer is the story's count (re-derived from the text), the
    generator is seeded, and the recipe's verl-style rows load with the same golds."""
    import re
    import subprocess
    import sys

    from reasoning_rl.data.generators import word_chain

    rows = word_chain(60, 5, steps=3, max_operand=12)
    assert rows == word_chain(60, 5, steps=3, max_operand=12) != word_chain(60, 6, steps=3, max_operand=12)
    for row in rows:
        value = int(re.match(r"\w+ has (\d+) ", row["question"]).group(1))
        deltas = re.findall(
            r"(?:buys (\d+) more|gives \w+ (\d+) more|gives away (\d+)|loses (\d+))", row["question"]
        )
        assert len(deltas) == 3
        for buy, gift, away, lost in deltas:
            value += int(buy or gift or 0) - int(away or lost or 0)
            assert value >= 1  # never a negative count in the story
        assert str(value) == row["answer"]
    with pytest.raises(ValueError, match="1 <= steps"):
        word_chain(1, 0, steps=0)
    recipe = Path(__file__).resolve().parents[2] / "datasets" / "recipes" / "word_chain.py"
    out = tmp_path / "wc.jsonl"
    subprocess.run(
        [
            sys.executable,
            str(recipe),
            str(out),
            "--size",
            "6",
            "--seed",
            "5",
            "--steps",
            "3",
            "--max-operand",
            "12",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    ex = load_examples([SourceConfig(path=str(out))], data_cfg(grader_map={"word_chain": "math"}), seed=0)
    assert [e.ground_truth for e in ex] == [r["answer"] for r in rows[:6]]


def test_word_chain_long_tail_solutions_and_sft_rows(tmp_path: Path) -> None:
    """The learning workload's long tail: with max_steps the operation counts spread log-uniformly over
    [steps, max_steps]; every worked solution re-derives its row's answer line by line and ends in the boxed
    answer; the recipe's SFT rows are other problems than its RL rows and read as rrl sft reads them."""
    import json
    import re
    import subprocess
    import sys

    from reasoning_rl.config.sft import SftConfig
    from reasoning_rl.data.generators import word_chain
    from reasoning_rl.data.sft import row_messages

    rows = word_chain(400, 3, steps=2, max_steps=48, max_operand=20)
    counts = [row["solution"].count("\nStep ") for row in rows]
    assert min(counts) == 2 and max(counts) == 48
    assert sorted(counts)[len(counts) // 2] <= 14 < sum(counts) / len(counts)  # long-tailed: median < mean
    assert sum(c >= 36 for c in counts) >= 0.08 * len(counts)
    for row in rows:
        lines = row["solution"].splitlines()
        value = int(re.match(r"\w+ starts with (\d+) ", lines[0]).group(1))
        assert row["question"].startswith(lines[0].split(" starts with ")[0] + f" has {value} ")
        for line in lines[1:-1]:
            a, op, b, c = re.search(r"so (\d+) ([+-]) (\d+) = (\d+)\.", line).groups()
            assert int(a) == value and int(c) == (value + int(b) if op == "+" else value - int(b))
            value = int(c)
        assert str(value) == row["answer"] and lines[-1].endswith(f"\\boxed{{{value}}}.")
    with pytest.raises(ValueError, match="max_steps"):
        word_chain(1, 0, steps=5, max_steps=4)
    recipe = Path(__file__).resolve().parents[2] / "datasets" / "recipes" / "word_chain.py"
    rl, sft = tmp_path / "rl.jsonl", tmp_path / "sft.jsonl"
    cmd = [sys.executable, str(recipe), str(rl), "--size", "20", "--max-steps", "30", "--sft", str(sft)]
    subprocess.run([*cmd, "--sft-size", "30"], check=True, capture_output=True, text=True)
    rl_rows = [json.loads(line) for line in rl.read_text().splitlines()]
    sft_rows = [json.loads(line) for line in sft.read_text().splitlines()]
    assert len(rl_rows) == 20 and len(sft_rows) == 30
    assert not {r["prompt"][0]["content"] for r in rl_rows} & {r["prompt"][0]["content"] for r in sft_rows}
    messages = row_messages(sft_rows[0], "sft.jsonl:row 1", SftConfig(), None)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"].endswith("\\boxed{}.") and "\\boxed{" in messages[1]["content"]
