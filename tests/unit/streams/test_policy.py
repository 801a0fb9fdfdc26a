"""The stream store's eviction policy, table-tested."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from gateway.streams.policy import Held, Limits, Plan, Totals, plan

LIM = Limits(max_streams=3, max_bytes=100, retention_s=10.0)
NOW = 1000.0
LIVE = math.inf


def plan_of(held: list[Held], streams: int, nbytes: int) -> Plan:
    """The plan for the streams `held` (live and finished, in any order): the policy is given
    the finished ones in the order they finished (by time; equal times as listed)."""
    finished = sorted((h for h in held if h.finished_at != LIVE), key=lambda h: h.finished_at)
    totals = Totals(
        len(held), sum(h.nbytes for h in held), len(finished), sum(h.nbytes for h in finished)
    )
    return plan(finished, totals, LIM, NOW, streams, nbytes)


@pytest.mark.parametrize(
    ("held", "streams", "nbytes", "expected"),
    [
        # Room to spare: nothing goes.
        ([Held("a", 10), Held("b", 10, 995.0)], 1, 0, Plan((), True)),
        # A finished stream past its retention always goes, room or not.
        ([Held("a", 10, 990.0), Held("b", 10)], 0, 0, Plan(("a",), True)),
        # Full by count: the finished one goes first, the earliest finished first.
        (
            [Held("a", 1), Held("b", 1, 999.0), Held("c", 1, 995.0)],
            1,
            0,
            Plan(("c",), True),
        ),
        # Full by bytes: as many finished ones as it takes, earliest first.
        (
            [Held("a", 40), Held("b", 30, 998.0), Held("c", 20, 996.0)],
            0,
            40,
            Plan(("c", "b"), True),
        ),
        # Only live streams: a new one does not fit and nothing is evicted.
        ([Held("a", 1), Held("b", 1), Held("c", 1)], 1, 0, Plan((), False)),
        # Evicting every finished one would not be enough: none is evicted for nothing.
        ([Held("a", 90), Held("b", 5, 999.0)], 0, 20, Plan((), False)),
        # ... but the expired ones still go.
        ([Held("a", 90), Held("b", 5, 980.0)], 0, 20, Plan(("b",), False)),
        # Exactly at the bounds fits.
        ([Held("a", 50), Held("b", 30)], 1, 20, Plan((), True)),
        # Expiry is inclusive of its instant.
        ([Held("a", 5, 990.0)], 0, 0, Plan(("a",), True)),
        # Equal finish times: in the order they finished.
        ([Held("y", 1, 995.0), Held("x", 1, 995.0), Held("z", 1)], 1, 0, Plan(("y",), True)),
        # Nothing held.
        ([], 1, 0, Plan((), True)),
    ],
)
def test_plan(held: list[Held], streams: int, nbytes: int, expected: Plan) -> None:
    assert plan_of(held, streams, nbytes) == expected


def test_live_streams_are_never_evicted() -> None:
    held = [Held(f"s{i}", 30) for i in range(4)]  # over both bounds already
    assert plan_of(held, 1, 50) == Plan((), False)


def test_a_finished_stream_within_its_retention_stays_when_there_is_room() -> None:
    assert plan_of([Held("a", 10, NOW - LIM.retention_s + 0.001)], 1, 10) == Plan((), True)


def test_a_plan_reads_the_finished_streams_only_as_far_as_it_needs() -> None:
    """A full store plans at every open: its cost is what it evicts, not what it holds."""
    read: list[str] = []

    def finished() -> Iterator[Held]:
        for i in range(10_000):
            read.append(f"f{i}")
            yield Held(f"f{i}", 1, 995.0 + i * 1e-4)

    held = Totals(streams=10_002, nbytes=10_002, finished_streams=10_000, finished_nbytes=10_000)
    limits = LIM._replace(max_streams=10_002, max_bytes=1 << 20)
    assert plan(finished(), held, limits, NOW, 1, 0) == Plan(("f0",), True)
    assert read == ["f0", "f1"]  # the one evicted, and the first kept
