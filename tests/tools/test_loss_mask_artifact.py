"""The tool rollout's loss mask is in the samples file (issue 30 item 10: it appeared in no artifact, so nobody
could see which tokens were trained); failed on main 5090d93."""

from __future__ import annotations

from reasoning_rl.rollout.base import Completion
from reasoning_rl.trainer.tool_collect import masked_spans, turn_fields


def test_samples_rows_mark_the_untrained_tool_spans() -> None:
    mask = [1, 1, 0, 0, 0, 1, 1, 0, 1]
    comp = Completion(0, 0, [5], list(range(9)), [0.0] * 9, "text", "stop", mask=mask)
    fields = turn_fields(comp)
    assert fields["response_tokens"] == 9 and fields["trained_tokens"] == 5
    assert fields["tool_token_spans"] == [[2, 5], [7, 8]]
    assert masked_spans([0, 0]) == [[0, 2]] and masked_spans([1, 1]) == []
    # a plain (single-turn) completion trains on every token and carries no tool fields
    assert turn_fields(Completion(0, 0, [5], [1, 2], [0.0, 0.0], "t", "stop")) == {}
