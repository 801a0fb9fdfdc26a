"""The drill's fixed set of distinct requests."""

from __future__ import annotations

import pytest

from drill.requests import make_specs


def test_prompts_are_distinct_and_lengths_within_bounds() -> None:
    specs = make_specs(32, 200, 300)
    assert [s.index for s in specs] == list(range(32))
    assert len({s.prompt for s in specs}) == 32
    assert all(200 <= s.max_tokens <= 300 for s in specs)
    assert min(s.max_tokens for s in specs) == 200
    assert max(s.max_tokens for s in specs) == 300


def test_the_set_is_the_same_every_time() -> None:
    assert make_specs(8, 10, 20) == make_specs(8, 10, 20)


def test_one_length() -> None:
    assert {s.max_tokens for s in make_specs(5, 64, 64)} == {64}
    assert make_specs(1, 10, 20)[0].max_tokens == 10


@pytest.mark.parametrize(("n", "lo", "hi"), [(0, 1, 2), (3, 0, 2), (3, 5, 4)])
def test_bad_arguments(n: int, lo: int, hi: int) -> None:
    with pytest.raises(ValueError):
        make_specs(n, lo, hi)
