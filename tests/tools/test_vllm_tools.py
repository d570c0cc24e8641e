"""The tool loop on the real engine: vLLM (CPU in CI) with SmolLM2-135M-Instruct, prompts that end inside a
```python block so the model's continuation closes it; the python tool runs each call in the real Docker
sandbox and generation continues with the output in context."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reasoning_rl.rollout import SamplingConfig, make_engine
from reasoning_rl.rollout.multiturn import ToolRolloutConfig, run_tool_rollouts

pytestmark = [pytest.mark.vllm, pytest.mark.docker, pytest.mark.slow]
FENCE = "```"
PROGRAMS = ["print(6 * 7)", "x = 12\nprint(x ** 2)", "print(sum(range(10)))"]
OUTPUTS = ["42\n", "144\n", "45\n"]


def test_vllm_closes_forced_blocks_runs_them_in_the_sandbox_and_continues(python_tool: Any) -> None:
    pytest.importorskip("vllm")
    from reasoning_rl.policy import load_tokenizer
    from reasoning_rl.policy.model import smollm2_hf_dir

    model = smollm2_hf_dir()
    tok = load_tokenizer(str(model))
    engine = make_engine("vllm", str(model), max_model_len=512, kv_cache_memory_bytes=64 << 20)
    prompts = [
        tok.encode(
            f"Here is a Python program and what it prints.\n\n{FENCE}python\n{code}\n",
            add_special_tokens=False,
        )
        for code in PROGRAMS
    ]
    cfg = ToolRolloutConfig(
        format="fenced", max_turns=1, max_tokens=96, sampling=SamplingConfig(temperature=0.0, max_tokens=48)
    )
    trajs = asyncio.run(run_tool_rollouts(engine, prompts, {"python": python_tool}, tok, cfg))
    called = [t for t in trajs if t.turns]
    assert len(called) >= 2, [tok.decode(t.token_ids) for t in trajs]  # greedy SmolLM2 closes the fence
    for t in called:
        k = t.prompt_index
        (turn,) = t.turns
        assert turn.arguments["code"].strip() == PROGRAMS[k] and turn.result.status == "ok"
        assert turn.result.text == OUTPUTS[k]  # computed by the real sandbox
        # the output block was inserted as tool tokens (mask 0) and the model went on generating after it
        first_tool = t.mask.index(0)
        after = len(t.mask) - 1 - t.mask[::-1].index(0)
        inserted = tok.decode(t.token_ids[first_tool : after + 1])
        assert inserted == f"{FENCE}output\n{OUTPUTS[k]}{FENCE}\n"
        assert after + 1 < len(t.token_ids) and all(t.mask[after + 1 :])
        assert len(t.logprobs) == len(t.token_ids)
    # per-prompt seeds (what the loop passes for each trajectory's calls): a prompt's sample depends on its
    # own seed, not on which other prompts share the request
    s = SamplingConfig(temperature=1.0, max_tokens=16, ignore_eos=True, logprobs=False)
    both = engine.generate(prompts[:2], s.model_copy(update={"prompt_seeds": (11, 22)}))
    alone = engine.generate(prompts[1:2], s.model_copy(update={"prompt_seeds": (22,)}))
    other = engine.generate(prompts[1:2], s.model_copy(update={"prompt_seeds": (23,)}))
    assert both[1].token_ids == alone[0].token_ids != other[0].token_ids
