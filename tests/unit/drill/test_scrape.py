"""Reading the gateway's /metrics and /readyz."""

from __future__ import annotations

import pytest

from drill.scrape import (
    Counters,
    counters,
    parse_prometheus,
    replica_states,
    routable_replicas,
)

TEXT = """\
# HELP shardgate_migrations_total Streams resumed on another replica.
# TYPE shardgate_migrations_total counter
shardgate_migrations_total{model="sim-llama"} 3.0
shardgate_migrations_total{model="other"} 1.0
shardgate_migrations_created{model="sim-llama"} 1.7e9
shardgate_retries_total{model="sim-llama"} 2.0
shardgate_ejections_total{replica="sim-a"} 1.0
shardgate_requests_total{model="sim-llama",outcome="length",class="0"} 40.0
shardgate_requests_total{model="sim-llama",outcome="length",class="5"} 2.0
shardgate_requests_total{model="sim-llama",outcome="error",class="0"} 1.0
shardgate_replica_state{replica="127.0.0.1:50081"} 2.0
shardgate_replica_state{replica="127.0.0.1:50082"} 0.0
shardgate_up 1
this line is not prometheus {
weird{a="x \\"quoted\\", y"} NaN
"""


def test_parse_keeps_series_and_labels() -> None:
    m = parse_prometheus(TEXT)
    assert [s.labels for s in m["shardgate_migrations_total"]] == [
        {"model": "sim-llama"},
        {"model": "other"},
    ]
    assert m["shardgate_up"][0].value == 1.0
    assert m["weird"][0].labels == {"a": 'x \\"quoted\\", y'}
    assert "this" not in m


def test_counters_sum_over_labels() -> None:
    c = counters(parse_prometheus(TEXT))
    assert (c.migrations, c.retries, c.ejections) == (4.0, 2.0, 1.0)
    assert c.outcomes == {"length": 42.0, "error": 1.0}


def test_counter_deltas() -> None:
    before = Counters(1.0, 0.0, 0.0, {"length": 10.0})
    after = Counters(4.0, 2.0, 1.0, {"length": 30.0, "error": 1.0})
    d = after.minus(before)
    assert (d.migrations, d.retries, d.ejections) == (3.0, 2.0, 1.0)
    assert d.outcomes == {"error": 1.0, "length": 20.0}


def test_no_metrics_yet_reads_as_zero() -> None:
    assert counters({}) == Counters()


def test_replica_states_by_address() -> None:
    states = replica_states(parse_prometheus(TEXT))
    assert states == {"127.0.0.1:50081": 2, "127.0.0.1:50082": 0}


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ({"ready": True, "models": {"sim-llama": 4}}, 4),
        ({"ready": False, "models": {"sim-llama": 0}}, 0),
        ({"ready": False, "models": {}}, 0),
        ({"ready": False}, None),
        ({"models": {"sim-llama": "4"}}, None),
        (None, None),
        ([1, 2], None),
    ],
)
def test_routable_replicas_from_readyz(body: object, want: int | None) -> None:
    assert routable_replicas(body, "sim-llama") == want
