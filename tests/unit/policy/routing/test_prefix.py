from __future__ import annotations

import subprocess
import sys

import pytest

from gateway.policy.routing.prefix import PrefixHasher, PrefixIndex
from gateway.types import Message

H = PrefixHasher(block_chars=4, max_blocks=3)


@pytest.mark.parametrize(
    ("text", "blocks"),
    [("", 0), ("abc", 0), ("abcd", 1), ("abcdefg", 1), ("abcdefgh", 2), ("a" * 100, 3)],
)
def test_whole_blocks_only_up_to_max(text: str, blocks: int) -> None:
    assert len(H.prompt("m", "", text)) == blocks


def test_chained_prefix_identity() -> None:
    a = H.prompt("m", "", "abcdefghijkl")
    assert H.prompt("m", "", "abcdefghXXXX")[:2] == a[:2]
    assert H.prompt("m", "", "abcdefghXXXX")[2] != a[2]
    # The same block after a different prefix hashes differently (chained).
    assert H.prompt("m", "", "XXXXefgh")[1] != a[1]
    assert len(set(a)) == 3


@pytest.mark.parametrize(("model", "lora"), [("other", ""), ("m", "sql")])
def test_model_and_adapter_start_the_chain(model: str, lora: str) -> None:
    assert H.prompt(model, lora, "abcd") != H.prompt("m", "", "abcd")


def test_non_ascii_blocks_are_characters() -> None:
    text = "éèêë" + "abcd"
    hashes = H.prompt("m", "", text)
    assert len(hashes) == 2
    assert H.prompt("m", "", "éèêëabcdXYZW")[:2] == hashes


def test_messages_prefix() -> None:
    h = PrefixHasher(block_chars=8, max_blocks=64)
    sys_msg = Message("system", "You are a helpful assistant. " * 4)
    one = h.messages("m", "", [sys_msg, Message("user", "hi there, how are you")])
    two = h.messages("m", "", [sys_msg, Message("user", "something else entirely")])
    shared = len(sys_msg.content) // 8
    assert one[:shared] == two[:shared] and one != two
    # Roles count: the same text under another role is another prefix.
    assert h.messages("m", "", [Message("user", sys_msg.content)])[0] != one[0]


def test_messages_stop_at_the_limit() -> None:
    huge = Message("user", "x" * 1_000_000)
    assert len(H.messages("m", "", [huge, huge])) == 3


def test_stable_across_processes() -> None:
    code = (
        "from gateway.policy.routing.prefix import PrefixHasher;"
        "print(PrefixHasher(4, 3).prompt('m', 'l', 'abcdefghijkl'))"
    )
    out = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert out == {f"{H.prompt('m', 'l', 'abcdefghijkl')}\n"}


def test_index_longest_match_per_replica() -> None:
    idx = PrefixIndex(capacity=100, owners=4)
    idx.record([1, 2, 3, 4], "a")
    idx.record([1, 2], "b")
    assert idx.match([1, 2, 3, 4, 5]) == {"a": 4, "b": 2}
    assert idx.match([9, 2]) == {"a": 2, "b": 2}  # hashes are chained: 2 stands for 1+2
    assert idx.match([7, 8]) == {}


def test_index_single_owner_is_the_latest() -> None:
    idx = PrefixIndex(capacity=100, owners=1)
    idx.record([1, 2], "a")
    idx.record([1, 2], "b")
    assert idx.match([1, 2]) == {"b": 2}


def test_index_keeps_the_last_owners() -> None:
    idx = PrefixIndex(capacity=100, owners=2)
    for name in ("a", "b", "a", "c"):
        idx.record([1], name)
    assert idx.match([1]) == {"c": 1, "a": 1}


def test_index_is_bounded_lru() -> None:
    idx = PrefixIndex(capacity=3)
    idx.record([1, 2, 3], "a")
    idx.record([1], "a")  # 1 is used again: 2 is now the oldest
    idx.record([4], "b")
    assert len(idx) == 3
    assert idx.match([1, 2, 3, 4]) == {"a": 3, "b": 4}
    assert idx.match([2]) == {}
