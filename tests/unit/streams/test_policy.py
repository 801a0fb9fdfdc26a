"""The stream store's eviction policy, table-tested."""

from __future__ import annotations

import math

import pytest

from gateway.streams.policy import Held, Limits, Plan, plan

LIM = Limits(max_streams=3, max_bytes=100, retention_s=10.0)
NOW = 1000.0
LIVE = math.inf


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
        # Equal finish times: by id, so the plan is deterministic.
        ([Held("y", 1, 995.0), Held("x", 1, 995.0), Held("z", 1)], 1, 0, Plan(("x",), True)),
        # Nothing held.
        ([], 1, 0, Plan((), True)),
    ],
)
def test_plan(held: list[Held], streams: int, nbytes: int, expected: Plan) -> None:
    assert plan(held, LIM, NOW, streams, nbytes) == expected


def test_live_streams_are_never_evicted() -> None:
    held = [Held(f"s{i}", 30) for i in range(4)]  # over both bounds already
    assert plan(held, LIM, NOW, 1, 50) == Plan((), False)


def test_a_finished_stream_within_its_retention_stays_when_there_is_room() -> None:
    assert plan([Held("a", 10, NOW - LIM.retention_s + 0.001)], LIM, NOW, 1, 10) == Plan((), True)
