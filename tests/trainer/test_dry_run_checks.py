"""``rrl train --dry-run`` refuses what the real run refuses, in the run's own line (issue 30 item 5: the tool
set; issue 28: resource requests; issue 30 item 6: an empty parquet). Each test failed on main 5090d93."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reasoning_rl.cli.app import app
from reasoning_rl.config import ConfigError, load_config
from reasoning_rl.rollout.toolset import ToolSet
from tests.trainer.test_train_e2e import config

runner = CliRunner()


def _qa(tmp_path: Path) -> Path:
    path = tmp_path / "qa.jsonl"
    path.write_text(
        "".join(json.dumps({"question": f"{i}+1", "answer": str(i + 1)}) + "\n" for i in range(4))
    )
    return path


def _cfg(tmp_path: Path, model: Path) -> Path:
    return config(
        tmp_path, model, "dry", data={"train": {"path": str(_qa(tmp_path))}, "default_grader": "math"}
    )


def _refused(cfg: Path, *extra: str) -> str:
    res = runner.invoke(app, ["train", str(cfg), "--dry-run", *extra])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.stderr.strip().splitlines()) <= 3, res.output
    return " ".join(res.stderr.split())


def test_tool_set_with_a_misspelled_option_is_one_config_error(tmp_path: Path) -> None:
    """Before: a ValueError out of ToolSet.from_config, which the CLI printed as a 45-line traceback."""
    cfg = load_config(
        config(tmp_path, tmp_path, "t"),
        ["rollout.tools=[python]", "rollout.tool_options={python: {pool_sise: 2}}"],
    )
    with pytest.raises(ConfigError, match=r"rollout\.tool_options\.python: .*pool_sise"):
        ToolSet.from_config(cfg.rollout, tokenizer=None)  # type: ignore[arg-type]


def test_a_tool_given_as_module_attr_is_built_under_its_own_name(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "my_tools.py").write_text(
        textwrap.dedent(
            '''
            from reasoning_rl.tools import tool

            @tool()
            def lookup(key: str) -> str:
                """Look up a constant."""
                return {"c": "299792458"}.get(key, "unknown")
            '''
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    base = config(tmp_path, tmp_path, "t")
    cfg = load_config(base, ["rollout.tools=[my_tools:lookup]", "rollout.tool_format=hermes"])
    tools = ToolSet.from_config(cfg.rollout, tokenizer=None)  # type: ignore[arg-type]
    assert tools is not None and list(tools.tools) == ["lookup"]
    with pytest.raises(ConfigError, match=r"rollout\.tools: cannot load tool spec 'my_tools:nope'"):
        ToolSet.from_config(
            load_config(base, ["rollout.tools=[my_tools:nope]", "rollout.tool_format=hermes"]).rollout,
            tokenizer=None,  # type: ignore[arg-type]
        )
    with pytest.raises(ConfigError, match="expected module:attr"):
        load_config(base, ["rollout.tools=[':x']", "rollout.tool_format=hermes"])


@pytest.mark.slow
def test_dry_run_builds_the_tool_set_and_checks_the_request(tmp_path: Path, tiny_model_dir: Path) -> None:
    cfg = _cfg(tmp_path, tiny_model_dir)
    res = runner.invoke(
        app, ["train", str(cfg), "--dry-run", "rollout.tools=[calculator]", "rollout.tool_format=hermes"]
    )
    assert res.exit_code == 0, res.output
    assert "tools: calculator" in res.stdout and "resources: 1 node(s) x 1 rank(s)" in res.stdout
    bad = _refused(cfg, "rollout.tools=[python]", "rollout.tool_options={python: {pool_sise: 2}}")
    assert "rollout.tool_options.python" in bad and "pool_sise" in bad
    # issue 28: what the real run refuses (distributed.launch.check_request), the dry run refuses the same way
    split = _refused(cfg, "resources.placement=split", "resources.rollout_ranks=1")
    assert "leaves no training rank of 1" in split
    rows = _refused(cfg, "resources.ranks_per_node=64")  # 4 prompts x 8 samples = 32 rows for 64 ranks
    assert "64 ranks need at least 64 rows per update" in rows
    # issue 34: speculation the run cannot do exactly is refused before anything loads
    hf = _refused(cfg, "rollout.engine=hf", "rollout.speculative.method=ngram", "rollout.temperature=0")
    assert "rollout.speculative.method=ngram needs rollout.engine=vllm" in hf
    if importlib.util.find_spec("vllm") is not None:  # the auto engine is vLLM
        for temperature in ("0", "0.7"):  # issue 46: exact under sampling too, so no temperature is refused
            spec = ["rollout.speculative.method=ngram", f"rollout.temperature={temperature}"]
            ok = runner.invoke(app, ["train", str(cfg), "--dry-run", *spec])
            assert ok.exit_code == 0 and "speculative decoding: ngram (accepted)" in ok.stdout, ok.output
    assert not (tmp_path / "dry").exists()


@pytest.mark.slow
def test_empty_parquet_is_one_line(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Before: datasets' DatasetGenerationError, a 75-line traceback (an empty JSONL was one line)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    empty = tmp_path / "empty.parquet"
    pq.write_table(
        pa.table({"question": pa.array([], pa.string()), "answer": pa.array([], pa.string())}), empty
    )
    cfg = config(
        tmp_path, tiny_model_dir, "dry", data={"train": {"path": str(empty)}, "default_grader": "math"}
    )
    line = _refused(cfg)
    assert str(empty) in line and "0 rows" in line


def test_override_merging_is_documented_and_behaves_as_documented(tmp_path: Path) -> None:
    """Issue 30: a mapping override merges into the file's mapping, which nothing said."""
    base = config(tmp_path, tmp_path, "m", grading={"options": {"math": {"mode": "lenient", "timeout_s": 3}}})
    cfg = load_config(
        base, ["grading.options={math: {mode: strict}}", "data.train=[{generator: arithmetic}]"]
    )
    assert cfg.grading.options == {"math": {"mode": "strict", "timeout_s": 3}}  # merged, key by key
    assert [s.generator for s in cfg.data.train] == ["arithmetic"]  # a list replaces
    helptext = " ".join(runner.invoke(app, ["train", "--help"], terminal_width=200).output.split())
    assert "A mapping value merges into the file's mapping key by key" in helptext
    assert "3 x the bytes of model.dtype per trainable parameter" in helptext  # checkpoint size
    doc = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    assert "merges into the file's mapping key by key" in doc


def test_a_tool_sandbox_without_its_docker_daemon_is_one_line(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47 follow-up: `rrl train examples/math_tir/config.yaml --dry-run` on a machine without a Docker daemon
    died with a SandboxError traceback out of ToolSet.from_config. The daemon is made unreachable here with a
    DOCKER_HOST socket that does not exist (and no client cached by an earlier test), so no Docker is needed."""
    from sandboxes import docker_backend

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-docker.sock'}")
    monkeypatch.setattr(docker_backend, "_client", None)
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)
    args = ["train", "examples/math_tir/config.yaml", "--dry-run", f"model.path={tiny_model_dir}"]
    res = runner.invoke(app, [*args, "run.doctor=false", f"run.dir={tmp_path / 'run'}"])
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output and len(res.stderr.strip().splitlines()) == 1, res.stderr
    line = res.stderr.strip()
    assert line.startswith("error: rollout.tools: the python tool cannot open its sandbox: ")
    assert "Docker daemon not reachable" in line and "rollout.tool_options.python.sandbox" in line
    assert not (tmp_path / "run").exists()
