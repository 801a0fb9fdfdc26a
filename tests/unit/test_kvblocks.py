"""Block names: the whole prefix a block ends, the same at any block size, seeded per model."""

from __future__ import annotations

import pytest
from shardgate.v1.kvblocks import block_names, extend, start

TOKENS = list(range(100, 164))  # 64 tokens


def test_a_name_covers_the_whole_prefix_it_ends() -> None:
    s = start("m")
    names = block_names(TOKENS, 16, s)
    assert len(names) == 4
    for i, name in enumerate(names):
        assert extend(s, TOKENS[: 16 * (i + 1)]).name == name
    # a child's name follows from its parent's state and its own tokens
    parent = extend(s, TOKENS[:16])
    assert extend(parent, TOKENS[16:32]).name == names[1]


def test_common_boundaries_are_named_alike_at_any_block_size() -> None:
    s = start("m")
    by16, by32 = block_names(TOKENS, 16, s), block_names(TOKENS, 32, s)
    assert by32 == [by16[1], by16[3]]


@pytest.mark.parametrize(
    ("tokens", "size", "most", "count"),
    [(TOKENS, 16, None, 4), (TOKENS[:47], 16, None, 2), (TOKENS, 16, 3, 3), ([], 16, None, 0)],
)
def test_only_whole_blocks_are_named(
    tokens: list[int], size: int, most: int | None, count: int
) -> None:
    assert len(block_names(tokens, size, start("m"), most)) == count


def test_another_model_adapter_or_token_changes_every_name_after_it() -> None:
    base = block_names(TOKENS, 16, start("m"))
    assert set(base).isdisjoint(block_names(TOKENS, 16, start("other")))
    assert set(base).isdisjoint(block_names(TOKENS, 16, start("m", "sql-lora")))
    changed = [*TOKENS[:20], 7, *TOKENS[21:]]
    got = block_names(changed, 16, start("m"))
    assert got[0] == base[0] and set(got[1:]).isdisjoint(base[1:])


def test_names_are_stable_across_processes() -> None:
    # (CRC-32 and Adler-32 of fixed bytes: a literal, so a change of the scheme is seen)
    assert block_names([1, 2, 3, 4], 2, start("m")) == [
        extend(start("m"), [1, 2]).name,
        extend(start("m"), [1, 2, 3, 4]).name,
    ]
    assert extend(start("m"), [1, 2]).name == 0x9664A2C604CA0071


def test_a_block_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="block_size"):
        block_names(TOKENS, 0, start("m"))
