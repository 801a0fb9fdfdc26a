from __future__ import annotations

import pytest

from gateway.config.pricing import ModelPrice, Pricing, TenantBudget
from gateway.observability import (
    GatewayMetrics,
    Outcome,
    ProtocolError,
    RejectReason,
    ReplicaState,
)
from gateway.observability.histogram import LoopHistogram
from gateway.observability.metrics import ITL_BUCKETS, TTFT_BUCKETS
from tests.unit.observability._scrape import Series, parse, value

PRICING = Pricing(
    models={"llama": ModelPrice(prompt_per_1k_usd=0.5, completion_per_1k_usd=1.5)},
    tenants={"acme": TenantBudget(monthly_budget_usd=100.0), "beta": TenantBudget()},
)


def make() -> GatewayMetrics:
    return GatewayMetrics(PRICING, models=["llama", "free"], tenants=["acme", "beta"])


def scrape(m: GatewayMetrics) -> Series:
    body, content_type = m.render()
    assert content_type.startswith("text/plain; version=")
    return parse(body)


def test_request_done_records_counts_latencies_and_tokens() -> None:
    m = make()
    m.request_done("llama", "acme", 2, Outcome.OK, 0.1, 1.0, 1000, 2000, 300)
    m.request_done("llama", "acme", 2, Outcome.LENGTH, None, 3.0, 10, 20)
    s = scrape(m)
    assert value(s, "shardgate_requests_total", model="llama", outcome="ok", **{"class": "2"}) == 1
    assert (
        value(s, "shardgate_requests_total", model="llama", outcome="length", **{"class": "2"}) == 1
    )
    assert value(s, "shardgate_prompt_tokens_total", tenant="acme", model="llama") == 1010
    assert value(s, "shardgate_completion_tokens_total", tenant="acme", model="llama") == 2020
    assert value(s, "shardgate_cached_prompt_tokens_total", tenant="acme", model="llama") == 300
    # No first token on the second request: only one TTFT sample, two e2e samples.
    assert value(s, "shardgate_time_to_first_token_seconds_count", model="llama") == 1
    assert value(s, "shardgate_time_to_first_token_seconds_sum", model="llama") == 0.1
    assert value(s, "shardgate_e2e_request_latency_seconds_count", model="llama") == 2
    assert value(s, "shardgate_e2e_request_latency_seconds_sum", model="llama") == 4.0
    assert value(s, "shardgate_e2e_request_latency_seconds_bucket", model="llama", le="1.0") == 1
    assert value(s, "shardgate_e2e_request_latency_seconds_bucket", model="llama", le="+Inf") == 2


def test_protocol_errors_count_by_kind_from_zero() -> None:
    m = make()
    s = scrape(m)
    for kind in ProtocolError:
        assert value(s, "shardgate_http_protocol_errors_total", kind=kind.value) == 0
    m.protocol_error(ProtocolError.HEADER_TIMEOUT)
    m.protocol_error(ProtocolError.HEADER_TIMEOUT)
    m.protocol_error(ProtocolError.BAD_BODY)
    s = scrape(m)
    assert value(s, "shardgate_http_protocol_errors_total", kind="header_timeout") == 2
    assert value(s, "shardgate_http_protocol_errors_total", kind="bad_body") == 1
    assert value(s, "shardgate_http_protocol_errors_total", kind="body_timeout") == 0


def test_histogram_bucket_bounds_are_inclusive_and_cumulative() -> None:
    m = make()
    m.itl("llama", 0.5)  # exactly on a bound: counts in le="0.5"
    m.itl_batch("llama", [0.0001, 0.02, 99.0])
    m.itl_observer("llama")(0.6)
    s = scrape(m)

    def le(bound: str) -> float:
        return value(s, "shardgate_inter_token_latency_seconds_bucket", model="llama", le=bound)

    assert le("0.001") == 1
    assert le("0.02") == 2
    assert le("0.4") == 2
    assert le("0.5") == 3
    assert le("0.75") == 4
    assert le("5.0") == 4
    assert le("+Inf") == 5
    assert value(s, "shardgate_inter_token_latency_seconds_count", model="llama") == 5
    assert value(s, "shardgate_inter_token_latency_seconds_sum", model="llama") == pytest.approx(
        0.5 + 0.0001 + 0.02 + 99.0 + 0.6
    )


def test_bucket_ranges_suit_llm_serving() -> None:
    assert TTFT_BUCKETS[0] == 0.005 and TTFT_BUCKETS[-1] == 60.0
    assert ITL_BUCKETS[0] == 0.001 and ITL_BUCKETS[-1] == 5.0
    assert 0.5 in TTFT_BUCKETS and 0.5 in ITL_BUCKETS  # the alert threshold is a bound


def test_cost_is_priced_per_1k_tokens_by_tenant() -> None:
    m = make()
    assert m.request_done("llama", "acme", 0, Outcome.OK, 0.1, 1.0, 1000, 2000) == 3.5
    assert m.request_done("llama", "beta", 0, Outcome.OK, 0.1, 1.0, 200, 0) == 0.1
    assert m.request_done("free", "acme", 0, Outcome.OK, 0.1, 1.0, 5000, 5000) == 0.0
    s = scrape(m)
    assert value(s, "shardgate_cost_usd_total", tenant="acme", model="llama") == 3.5
    assert value(s, "shardgate_cost_usd_total", tenant="beta", model="llama") == 0.1
    assert value(s, "shardgate_cost_usd_total", tenant="acme", model="free") == 0.0


def test_budgets_are_gauges_and_follow_a_new_pricing() -> None:
    m = make()
    s = scrape(m)
    assert value(s, "shardgate_tenant_budget_usd", tenant="acme") == 100.0
    assert ("shardgate_tenant_budget_usd", frozenset({("tenant", "beta")})) not in s

    m.set_pricing(
        Pricing(
            models={"llama": ModelPrice(prompt_per_1k_usd=1.0, completion_per_1k_usd=0.0)},
            tenants={"beta": TenantBudget(monthly_budget_usd=7.0)},
        )
    )
    s = scrape(m)
    assert value(s, "shardgate_tenant_budget_usd", tenant="beta") == 7.0
    assert ("shardgate_tenant_budget_usd", frozenset({("tenant", "acme")})) not in s
    assert m.request_done("llama", "acme", 0, Outcome.OK, 0.1, 1.0, 1000, 1000) == 1.0


def test_label_sets_stay_closed() -> None:
    m = make()
    for i in range(50):  # client-chosen strings must not mint series
        weird = "weird"
        m.request_done(f"model-{i}", f"tenant-{i}", 1000 + i, weird, 0.1, 1.0, 1, 1)  # type: ignore[arg-type]
        m.itl(f"model-{i}", 0.01)
        m.rejected(f"model-{i}", f"reason-{i}")  # type: ignore[arg-type]
    s = scrape(m)
    other = {"model": "other", "outcome": "other", "class": "other"}
    assert value(s, "shardgate_requests_total", **other) == 50
    assert value(s, "shardgate_prompt_tokens_total", tenant="other", model="other") == 50
    assert value(s, "shardgate_inter_token_latency_seconds_count", model="other") == 50
    assert value(s, "shardgate_rejections_total", model="other", reason="other", code="503") == 50
    labels = {v for (_, ls) in s for k, v in ls if k in ("model", "tenant", "outcome", "reason")}
    assert not any(v.startswith(("model-", "tenant-", "reason-")) or v == "weird" for v in labels)


def test_anonymous_tenant_and_announced_models_are_known() -> None:
    m = make()
    m.add_models(["announced"])
    m.request_done("announced", "anonymous", -3, Outcome.CLIENT_GONE, None, 0.2, 5, 0)
    s = scrape(m)
    assert (
        value(
            s,
            "shardgate_requests_total",
            model="announced",
            outcome="client_gone",
            **{"class": "-3"},
        )
        == 1
    )
    assert value(s, "shardgate_prompt_tokens_total", tenant="anonymous", model="announced") == 5


def test_rejections_count_by_reason_with_status_and_as_requests() -> None:
    m = make()
    m.rejected("llama", RejectReason.RATE_TOKENS, klass=1)
    m.rejected("llama", RejectReason.QUEUE_FULL)
    m.rejected("llama", RejectReason.QUEUE_FULL)
    s = scrape(m)
    rej = "shardgate_rejections_total"
    assert value(s, rej, model="llama", reason="rate_tokens", code="429") == 1
    assert value(s, rej, model="llama", reason="queue_full", code="503") == 2
    req = "shardgate_requests_total"
    assert value(s, req, model="llama", outcome="rejected", **{"class": "1"}) == 1
    assert value(s, req, model="llama", outcome="rejected", **{"class": "0"}) == 2


def test_events_queue_wait_and_replica_state() -> None:
    m = make()
    m.preempted("llama", 0)
    m.migrated("llama")
    m.retried("llama")
    m.retried("llama")
    m.ejected("sim-a")
    m.queue_wait("llama", 3, 0.02)
    m.set_replica_state("sim-a", ReplicaState.EJECTED)
    m.set_replica_state("sim-b", ReplicaState.SUSPECT)
    m.set_replica_state("sim-b", ReplicaState.UP)
    s = scrape(m)
    assert value(s, "shardgate_preemptions_total", model="llama", **{"class": "0"}) == 1
    assert value(s, "shardgate_migrations_total", model="llama") == 1
    assert value(s, "shardgate_retries_total", model="llama") == 2
    assert value(s, "shardgate_ejections_total", replica="sim-a") == 1
    assert (
        value(s, "shardgate_queue_wait_seconds_bucket", model="llama", le="0.025", **{"class": "3"})
        == 1
    )
    assert value(s, "shardgate_replica_state", replica="sim-a") == 3
    assert value(s, "shardgate_replica_state", replica="sim-b") == 2

    m.keep_replicas(["sim-b"], ["sim-b"])  # a reload removed sim-a
    s = scrape(m)
    assert value(s, "shardgate_replica_state", replica="sim-b") == 2
    assert ("shardgate_replica_state", frozenset({("replica", "sim-a")})) not in s
    assert ("shardgate_ejections_total", frozenset({("replica", "sim-a")})) not in s


def test_config_version_hash_and_reload_failures() -> None:
    m = make()
    m.set_config(1, "aaaa")
    m.set_config(2, "0123abcd")
    m.reload_failed()
    s = scrape(m)
    assert value(s, "shardgate_config_version") == 2
    assert value(s, "shardgate_config_info", hash="0123abcd") == 1
    assert ("shardgate_config_info", frozenset({("hash", "aaaa")})) not in s
    assert value(s, "shardgate_config_reload_failures_total") == 1
    with pytest.raises(ValueError, match="hex"):
        m.set_config(3, "not a hash")


def test_callback_gauges_are_read_at_scrape_time() -> None:
    m = make()
    ages = {"sim-a": 0.25}
    m.register_heartbeat_age(lambda: ages)
    assert value(scrape(m), "shardgate_link_heartbeat_age_seconds", replica="sim-a") == 0.25

    ages["sim-a"] = 4.0
    s = scrape(m)
    assert value(s, "shardgate_link_heartbeat_age_seconds", replica="sim-a") == 4.0


def test_a_failing_callback_does_not_break_the_scrape(caplog: pytest.LogCaptureFixture) -> None:
    m = make()

    def broken() -> dict[str, float]:
        raise RuntimeError("boom")

    m.register_heartbeat_age(broken)
    m.migrated("llama")
    s = scrape(m)
    assert value(s, "shardgate_migrations_total", model="llama") == 1
    assert "heartbeat age callback failed" in caplog.text


def test_each_instance_has_its_own_registry() -> None:
    a, b = make(), make()
    a.migrated("llama")
    assert value(scrape(a), "shardgate_migrations_total", model="llama") == 1
    assert value(scrape(b), "shardgate_migrations_total", model="llama") == 0


@pytest.mark.parametrize("buckets", [(), (1.0, 0.5), (0.5, 0.5), (1.0, float("inf"))])
def test_loop_histogram_refuses_bad_buckets(buckets: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="buckets"):
        LoopHistogram("h", "h", ["model"], buckets)


def test_loop_histogram_checks_the_label_count() -> None:
    h = LoopHistogram("h", "h", ["model"], (1.0,))
    with pytest.raises(ValueError, match="labels"):
        h.labels("a", "b")
