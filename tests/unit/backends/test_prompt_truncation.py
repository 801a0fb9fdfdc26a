"""vLLM's truncate_prompt_tokens on a prompt's ids (engine_sidecar/backends/common/prompts.py)."""

from __future__ import annotations

import pytest

from engine_sidecar.backends.common.prompts import truncated

IDS = [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("keep", "side", "max_model_len", "want"),
    [
        (None, "left", 8, IDS),
        (3, "left", 8, [3, 4, 5]),
        (3, "right", 8, [1, 2, 3]),
        (3, "", 8, [1, 2, 3]),  # (any side but "left" keeps the first)
        (5, "left", 8, IDS),
        (9, "left", 8, IDS),
        (0, "left", 8, []),
        (-1, "left", 8, IDS),  # the model takes 8: 7 kept at most
        (-1, "left", 4, [3, 4, 5]),
        (-1, "right", 4, [1, 2, 3]),
        (-1, "right", 1, []),
    ],
)
def test_truncated(keep: int | None, side: str, max_model_len: int, want: list[int]) -> None:
    assert truncated(list(IDS), keep, side, max_model_len) == want
