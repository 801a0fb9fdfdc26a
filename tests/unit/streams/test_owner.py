"""Which worker an id names: the tag each worker puts in its ids, read back, and which sibling
(if any) a worker hands an id to."""

from __future__ import annotations

import pytest

from gateway.streams.owner import RESPONSE, STREAM, Owners, owner_of, tag
from gateway.streams.policy import Limits
from gateway.streams.store import StreamStore


@pytest.mark.parametrize(
    ("ident", "prefix", "owner"),
    [
        ("st_w0_abc", STREAM, 0),
        ("st_w1_a_b-c", STREAM, 1),  # (the rest may hold "_": only the first ends the tag)
        ("st_w12_x", STREAM, 12),
        ("resp_w3_0123abcd", RESPONSE, 3),
        ("st_w3_0123abcd", RESPONSE, None),  # another kind's
        ("resp_w3_0123abcd", STREAM, None),
        ("st_abcdef", STREAM, None),  # a single gateway's: untagged
        ("st_wxyz_abc", STREAM, None),
        ("st_w_abc", STREAM, None),
        ("st_w1", STREAM, None),  # no rest
        ("st_w1_", STREAM, None),
        ("st_w01_abc", STREAM, None),  # one spelling per worker
        ("st_w-1_abc", STREAM, None),
        ("st_w\u0661_abc", STREAM, None),  # a digit, but not an ASCII one
        ("st_w12345_abc", STREAM, None),  # more workers than any seat has
        ("", STREAM, None),
    ],
)
def test_owner_of(ident: str, prefix: str, owner: int | None) -> None:
    assert owner_of(ident, prefix) == owner


def test_a_tag_reads_back_as_its_worker() -> None:
    for i in (0, 1, 7, 42, 9999):
        assert owner_of(STREAM + tag(i) + "rest", STREAM) == i
    assert tag(None) == ""


@pytest.mark.parametrize(
    ("index", "ident", "sibling"),
    [
        (0, "st_w1_abc", 1),
        (1, "st_w0_abc", 0),
        (1, "st_w1_abc", None),  # its own
        (0, "st_w2_abc", None),  # no such worker (of 2): its own store says 404
        (0, "st_abc", None),
    ],
)
def test_which_sibling_keeps_an_id(index: int, ident: str, sibling: int | None) -> None:
    assert Owners(index, 2).sibling(ident, STREAM) == sibling


def test_a_workers_store_tags_its_ids_and_a_single_gateways_does_not() -> None:
    limits = Limits(8, 1 << 20, 60.0)
    worker, single = StreamStore(limits, 16, 1 << 16, tag=tag(1)), StreamStore(limits, 16, 1 << 16)
    tagged, plain = worker.open("t", "sse"), single.open("t", "sse")
    assert tagged is not None and plain is not None
    assert owner_of(tagged.sid, STREAM) == 1
    assert tagged.sid.startswith("st_w1_") and single.prefix == STREAM == plain.sid[:3]
    assert len(tagged.sid) == len(plain.sid) + len(tag(1))  # as unguessable as before
