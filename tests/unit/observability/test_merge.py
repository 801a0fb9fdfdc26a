"""Several workers' expositions as one: counters and histograms summed, gauges by meaning."""

from __future__ import annotations

import pytest

from gateway.config.pricing import Pricing, TenantBudget
from gateway.observability import GatewayMetrics, Outcome, RejectReason, ReplicaState
from gateway.observability.merge import merge, parse
from tests.unit.observability._scrape import Series, value
from tests.unit.observability._scrape import parse as series

PRICING = Pricing(tenants={"acme": TenantBudget(monthly_budget_usd=100.0)})


def worker() -> GatewayMetrics:
    return GatewayMetrics(PRICING, models=["llama"], tenants=["acme"])


def merged(*workers: GatewayMetrics) -> Series:
    return series(merge([parse(w.render()[0].decode()) for w in workers]))


def test_one_exposition_comes_back_unchanged() -> None:
    w = worker()
    w.request_done("llama", "acme", 0, Outcome.OK, 0.1, 1.0, 10, 20)
    w.itl("llama", 0.01)
    w.set_replica_state("r1", ReplicaState.UP)
    w.register_heartbeat_age(lambda: {"r1": 0.5})
    body = w.render()[0]
    assert merge([parse(body.decode())]) == body


def test_counters_and_histograms_are_the_totals() -> None:
    a, b = worker(), worker()
    a.request_done("llama", "acme", 0, Outcome.OK, 0.1, 1.0, 10, 20)
    b.request_done("llama", "acme", 0, Outcome.OK, 0.3, 3.0, 5, 7)
    b.request_done("llama", "acme", 0, Outcome.LENGTH, None, 30.0, 1, 2)
    b.rejected("llama", RejectReason.RATE_REQUESTS)
    s = merged(a, b)
    ok = {"model": "llama", "class": "0"}
    assert value(s, "shardgate_requests_total", outcome="ok", **ok) == 2
    assert value(s, "shardgate_requests_total", outcome="length", **ok) == 1  # b's only
    assert value(s, "shardgate_requests_total", outcome="rejected", **ok) == 1
    assert value(s, "shardgate_prompt_tokens_total", tenant="acme", model="llama") == 16
    e2e = "shardgate_e2e_request_latency_seconds"
    assert value(s, f"{e2e}_count", model="llama") == 3
    assert value(s, f"{e2e}_sum", model="llama") == 34.0
    assert value(s, f"{e2e}_bucket", model="llama", le="1.0") == 1
    assert value(s, f"{e2e}_bucket", model="llama", le="5.0") == 2
    assert value(s, f"{e2e}_bucket", model="llama", le="+Inf") == 3
    assert value(s, "shardgate_time_to_first_token_seconds_count", model="llama") == 2
    created = "shardgate_requests_created"
    first = series(a.render()[0])[(created, frozenset({"outcome": "ok", **ok}.items()))]
    assert value(s, created, outcome="ok", **ok) == first  # the earliest


def test_config_version_is_the_lowest_and_the_hash_counts_workers() -> None:
    a, b, c = worker(), worker(), worker()
    for w in (a, b, c):
        w.set_config(1, "aa")
    b.set_config(2, "bb")
    c.set_config(2, "bb")
    s = merged(a, b, c)
    assert value(s, "shardgate_config_version") == 1
    assert value(s, "shardgate_config_info", hash="aa") == 1
    assert value(s, "shardgate_config_info", hash="bb") == 2
    a.set_config(2, "bb")
    s = merged(a, b, c)
    assert value(s, "shardgate_config_version") == 2
    assert value(s, "shardgate_config_info", hash="bb") == 3
    assert ("shardgate_config_info", frozenset({("hash", "aa")})) not in s


U, S, D, E = ReplicaState.UP, ReplicaState.SUSPECT, ReplicaState.DOWN, ReplicaState.EJECTED


@pytest.mark.parametrize(
    ("states", "worst"),
    [((U, U), U), ((U, S), S), ((E, U), E), ((E, S), S), ((U, D), D), ((D, E), D), ((S, D), D)],
)
def test_a_replica_is_as_bad_as_the_worst_view(
    states: tuple[ReplicaState, ...], worst: ReplicaState
) -> None:
    workers = [worker() for _ in states]
    for w, state in zip(workers, states, strict=True):
        w.set_replica_state("r1", state)
    assert value(merged(*workers), "shardgate_replica_state", replica="r1") == worst


def test_heartbeat_age_is_the_oldest_and_the_budget_is_not_multiplied() -> None:
    a, b = worker(), worker()
    a.register_heartbeat_age(lambda: {"r1": 0.5, "r2": 9.0})
    b.register_heartbeat_age(lambda: {"r1": 4.0})
    s = merged(a, b)
    age = "shardgate_link_heartbeat_age_seconds"
    assert (value(s, age, replica="r1"), value(s, age, replica="r2")) == (4.0, 9.0)
    assert value(s, "shardgate_tenant_budget_usd", tenant="acme") == 100.0


def test_an_unknown_gauge_is_summed_and_garbage_is_refused() -> None:
    text = "# TYPE inflight gauge\ninflight 3\n"
    assert series(merge([parse(text), parse(text)])) == {("inflight", frozenset()): 6.0}
    with pytest.raises(ValueError):
        parse("this is not metrics\n")
