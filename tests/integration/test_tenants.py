"""Tenants, token buckets, priority scheduling and preemption, through the real API."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import gateway_pb2_grpc as pb_grpc

from engine_sidecar.backends.sim import SimConfig
from gateway.runtime.job import Job
from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.unit.observability.promql import metric_names

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
gateway: {default_max_tokens: 16, keepalive_s: 0.2}
model_capacity: {sim-llama: 1}
tenants:
  - {name: hi, keys: [sk-hi], default_priority: 10}
  - {name: lo, keys: [sk-lo], default_priority: 0, max_priority: 10}
  - {name: free, keys: [sk-free], requests_per_s: 2, requests_burst: 2}
  - {name: meter, keys: [sk-meter], tokens_per_min: 4000}
  - {name: tiny, keys: [sk-tiny], default_priority: 1}
scheduling:
  default: {max_depth: 10, max_wait_s: 60}
  classes:
    1: {max_depth: 1, max_wait_s: 0.5}
  preemption: {enabled: true, min_run_s: 0, max_per_request: 3}
"""
PROMPT = [{"role": "user", "content": "Tell me a long story."}]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(CONFIG, [{"sim": SimConfig(model="sim-llama", profile="fast")}])
    c.start()
    yield c
    c.stop()


_CLIENTS: dict[str, openai.OpenAI] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    for c in _CLIENTS.values():
        c.close()
    _CLIENTS.clear()


def client(cluster: Cluster, key: str) -> openai.OpenAI:
    c = _CLIENTS.get(key)
    if c is None:
        c = _CLIENTS[key] = openai.OpenAI(
            base_url=f"{cluster.http_url}/v1", api_key=key, max_retries=0, timeout=60
        )
    return c


def chat(cluster: Cluster, key: str, max_tokens: int, **kw: Any) -> Any:
    return client(cluster, key).chat.completions.with_raw_response.create(
        model="sim-llama",
        messages=PROMPT,
        max_tokens=max_tokens,
        extra_body={"ignore_eos": True},
        **kw,
    )


def stream_text(
    cluster: Cluster, key: str, max_tokens: int, on_chunk: Any = None, **kw: Any
) -> tuple[str, int, float]:
    """(text, content chunks, time of the first content chunk)."""
    raw = chat(cluster, key, max_tokens, stream=True, **kw)
    pieces: list[str] = []
    first = 0.0
    for chunk in raw.parse():
        if chunk.choices and chunk.choices[0].delta.content:
            if not pieces:
                first = time.monotonic()
            pieces.append(chunk.choices[0].delta.content)
            if on_chunk is not None:
                on_chunk(len(pieces))
    return "".join(pieces), len(pieces), first


def test_missing_or_unknown_key_is_401(cluster: Cluster) -> None:
    with pytest.raises(openai.AuthenticationError) as e:
        client(cluster, "sk-nobody").chat.completions.create(model="sim-llama", messages=PROMPT)
    assert e.value.status_code == 401
    req = urllib.request.Request(
        f"{cluster.http_url}/v1/chat/completions",
        data=json.dumps({"model": "sim-llama", "messages": PROMPT}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as no_key:
        urllib.request.urlopen(req, timeout=10)
    assert no_key.value.code == 401
    assert json.loads(no_key.value.read())["error"]["type"] == "authentication_error"
    no_key.value.close()


def test_free_gets_429_at_the_third_quick_request_then_succeeds_after_retry_after(
    cluster: Cluster,
) -> None:
    time.sleep(1.1)  # a full bucket
    for _ in range(2):
        r = chat(cluster, "sk-free", 2)
        assert r.headers["x-ratelimit-limit-requests"] == "2"
    with pytest.raises(openai.RateLimitError) as e:
        chat(cluster, "sk-free", 2)
    retry_after = float(e.value.response.headers["retry-after"])
    assert 0 < retry_after <= 1
    assert e.value.response.headers["x-ratelimit-remaining-requests"] == "0"
    time.sleep(retry_after)
    assert chat(cluster, "sk-free", 2).parse().choices[0].message.content


def test_unused_tokens_are_refunded(cluster: Cluster) -> None:
    # 4000 tokens/min: a request reserves its prompt + 3000 tokens up front.
    first = chat(cluster, "sk-meter", 3000, stream=True).parse()
    for i, _ in enumerate(first):
        if i == 5:
            break
    with pytest.raises(openai.RateLimitError) as e:
        chat(cluster, "sk-meter", 3000)
    assert int(e.value.response.headers["retry-after"]) > 10  # refill alone would take long
    first.close()  # the client goes away: what was not generated is refunded
    deadline = time.monotonic() + 10
    while True:
        try:
            second = chat(cluster, "sk-meter", 3000, stream=True).parse()
            break
        except openai.RateLimitError:
            assert time.monotonic() < deadline, "the unused reservation was not refunded"
            time.sleep(0.05)
    next(iter(second))
    second.close()


def test_higher_class_starts_before_lower_classes_that_arrived_earlier(cluster: Cluster) -> None:
    starts: dict[str, float] = {}

    def run(name: str, key: str, tokens: int) -> None:
        _, n, first = stream_text(cluster, key, tokens)
        assert n == tokens
        starts[name] = first

    def run_blocker(seen: Any) -> None:
        _, n, first = stream_text(cluster, "sk-hi", 600, on_chunk=seen)
        assert n == 600
        starts["blocker"] = first

    # The blocker holds the only slot; class 10 cannot be preempted by 10.
    blocker = start_blocker(cluster, 600, run_blocker)
    lows = [threading.Thread(target=run, args=(f"lo{i}", "sk-lo", 60)) for i in range(2)]
    for t in lows:
        t.start()
    assert cluster.gateway is not None
    queue = cluster.gateway.scheduler.pools["sim-llama"].queue
    deadline = time.monotonic() + 20
    while len(queue) < 2:  # both lows wait before any high arrives
        assert time.monotonic() < deadline
        time.sleep(0.01)
    highs = [threading.Thread(target=run, args=(f"hi{i}", "sk-hi", 60)) for i in range(2)]
    for t in highs:
        t.start()
    for t in [blocker, *lows, *highs]:
        t.join(60)
    assert len(starts) == 5
    assert max(starts["hi0"], starts["hi1"]) < min(starts["lo0"], starts["lo1"])


def test_preempted_stream_pauses_and_resumes_with_identical_text(cluster: Cluster) -> None:
    reference, n, _ = stream_text(cluster, "sk-lo", 400)
    assert n == 400
    pool = cluster.gateway.scheduler.pools["sim-llama"] if cluster.gateway else None
    assert pool is not None
    before = sum(pool.preemptions.values())
    high_done: dict[str, Any] = {}
    started = threading.Event()

    def high() -> None:
        started.wait(30)
        high_done["text"], high_done["n"], high_done["first"] = stream_text(cluster, "sk-hi", 50)

    t = threading.Thread(target=high)
    t.start()
    text, n, _ = stream_text(
        cluster, "sk-lo", 400, on_chunk=lambda i: started.set() if i == 20 else None
    )
    t.join(30)
    assert n == 400
    assert text == reference
    assert high_done["n"] == 50
    assert sum(pool.preemptions.values()) == before + 1


def test_x_priority_is_capped_at_the_tenants_maximum(cluster: Cluster) -> None:
    def served(cls: str) -> float:
        return total(
            samples(cluster), "shardgate_requests_total", outcome="length", **{"class": cls}
        )

    asked = [
        ("sk-lo", "50", "10"),
        ("sk-tiny", "10", "1"),
        ("sk-lo", "3", "3"),
        ("sk-hi", "-5", "-5"),
    ]
    for key, priority, expected in asked:
        before = {c: served(c) for c in ("10", "3", "1", "0", "-5")}
        chat(cluster, key, 2, extra_headers={"x-priority": priority})
        after = {c: served(c) for c in before}
        grew = {c for c in before if after[c] != before[c]}
        assert grew == {expected}, (key, priority)
        assert after[expected] == before[expected] + 1
    with pytest.raises(openai.BadRequestError) as e:
        chat(cluster, "sk-lo", 2, extra_headers={"x-priority": "urgent"})
    assert e.value.response.json()["error"]["param"] == "x-priority"


def test_x_priority_puts_a_request_ahead_of_its_tenants_earlier_ones(cluster: Cluster) -> None:
    starts: dict[str, float] = {}

    def run(name: str, **kw: Any) -> None:
        _, n, first = stream_text(cluster, "sk-lo", 40, **kw)
        assert n == 40
        starts[name] = first

    # The blocker (class 10) holds the only slot and cannot be preempted.
    blocker = start_blocker(cluster, 600)
    lows = [threading.Thread(target=run, args=(f"lo{i}",)) for i in range(2)]
    for t in lows:
        t.start()
    assert cluster.gateway is not None
    queue = cluster.gateway.scheduler.pools["sim-llama"].queue
    until(lambda: len(queue) == 2, 20.0, "both class-0 requests wait")
    urgent = threading.Thread(
        target=run, args=("urgent",), kwargs={"extra_headers": {"x-priority": "5"}}
    )
    urgent.start()
    until(lambda: len(queue) == 3, 20.0, "the class-5 request waits too")
    for t in [blocker, *lows, urgent]:
        t.join(60)
    assert len(starts) == 3
    assert starts["urgent"] < min(starts["lo0"], starts["lo1"])


def test_a_stop_string_across_a_preemption_stops_at_the_right_place(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The preemption cuts the stream inside its stop string: the victim generated (and held
    back) the start of it, its resumed run the rest."""
    raw = chat(cluster, "sk-lo", 400, stream=True)
    tokens = [
        c.choices[0].delta.content for c in raw.parse() if c.choices and c.choices[0].delta.content
    ]
    assert len(tokens) == 400  # one chunk per token
    text = "".join(tokens)
    offset = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens) + 1)]
    first, last = 60, 360  # the stop string: these tokens' text (wide: under load cuts come late)
    stop = text[offset[first] : offset[last]]
    assert text.find(stop) == offset[first]

    assert cluster.gateway is not None
    pool = cluster.gateway.scheduler.pools["sim-llama"]

    async def running() -> list[Job]:
        return list(pool.running)

    def preempt_inside() -> None:
        until(lambda: cluster.run(running()), 20.0, "the victim runs")
        [victim] = cluster.run(running())
        until(lambda: len(victim.generated) >= first + 2, 20.0, "the stop string began")
        stream_text(cluster, "sk-hi", 20)

    caplog.set_level(logging.INFO, logger="gateway.runtime.scheduler")
    before = sum(pool.preemptions.values())
    high = threading.Thread(target=preempt_inside)
    high.start()
    raw = chat(cluster, "sk-lo", 400, stream=True, stop=[stop])
    pieces, finish = [], None
    for chunk in raw.parse():
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    high.join(30)
    assert finish == "stop"
    assert "".join(pieces) == text[: offset[first]]
    assert sum(pool.preemptions.values()) == before + 1
    cuts = [
        int(m.group(1))
        for r in caplog.records
        if (m := re.search(r"preempted after (\d+) tokens", r.getMessage()))
    ]
    assert len(cuts) == 1 and first < cuts[0] < last, cuts  # the cut is inside the stop string


def start_blocker(cluster: Cluster, tokens: int, run: Any = None) -> threading.Thread:
    """A class-10 stream holding the pool's only slot, started (first token seen)."""
    started = threading.Event()

    def go() -> None:
        def seen(i: int) -> None:
            started.set()

        if run is None:
            stream_text(cluster, "sk-hi", tokens, on_chunk=seen)
        else:
            run(seen)

    t = threading.Thread(target=go)
    t.start()
    assert started.wait(30)
    return t


def test_queue_bounds_reject_and_nothing_hangs(cluster: Cluster) -> None:
    blocker = start_blocker(cluster, 800)
    outcome: dict[str, BaseException] = {}

    def queued() -> None:
        try:
            chat(cluster, "sk-tiny", 4)
        except openai.APIStatusError as e:
            outcome["first"] = e

    t = threading.Thread(target=queued)
    t.start()
    assert cluster.gateway is not None
    queue = cluster.gateway.scheduler.pools["sim-llama"].queue
    until(lambda: len(queue) == 1, 10.0, "the first class-1 request waits")
    with pytest.raises(openai.APIStatusError) as e:  # class 1 holds one waiter at most
        chat(cluster, "sk-tiny", 4)
    assert e.value.status_code in (429, 503)
    assert e.value.response.headers.get("retry-after")
    t.join(10)  # the queued one gives up after its class's 0.5 s
    assert not t.is_alive()
    err = outcome["first"]
    assert isinstance(err, openai.APIStatusError) and err.status_code == 503
    blocker.join(60)


def test_grpc_rate_limit_and_auth_status_codes(cluster: Cluster) -> None:
    with grpc.insecure_channel(cluster.grpc_target) as ch:
        stub = pb_grpc.GatewayStub(ch)
        req = pb.GenerateRequest(model="sim-llama", prompt="hi", max_tokens=2)
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Generate(req, timeout=10))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        time.sleep(1.1)
        meta = (("authorization", "Bearer sk-free"),)
        for _ in range(2):
            assert list(stub.Generate(req, metadata=meta, timeout=10))
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Generate(req, metadata=meta, timeout=10))
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        trailing = dict(e.value.trailing_metadata() or ())
        assert int(trailing["retry-after"]) >= 1


def samples(cluster: Cluster) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"{cluster.http_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def total(
    samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str
) -> float:
    return sum(
        v
        for lab, v in samples.get(name, [])
        if all(lab.get(k) == want for k, want in labels.items())
    )


def test_metrics_after_a_mixed_load_have_the_expected_series(cluster: Cluster) -> None:
    # The mixed load is this test's own (the scenarios above, run again), whatever ran before.
    before = samples(cluster)
    test_free_gets_429_at_the_third_quick_request_then_succeeds_after_retry_after(cluster)
    test_unused_tokens_are_refunded(cluster)
    test_preempted_stream_pauses_and_resumes_with_identical_text(cluster)
    test_queue_bounds_reject_and_nothing_hangs(cluster)
    after = samples(cluster)

    def grew(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    # Free: 3 served, 1 refused; meter: refused, then 2 closed early; preemption: 2 lo runs of
    # 400 tokens (one preempted once) and 1 hi; queue bounds: the blocker served, 2 refused.
    assert grew("shardgate_requests_total", outcome="length") == 7
    assert grew("shardgate_requests_total", outcome="client_gone") == 2
    for reason in ("rate_requests", "queue_full", "queue_timeout"):
        assert grew("shardgate_rejections_total", reason=reason) == 1, reason
    # Meter polls until its refund lands: refused once at least, more often under load.
    assert grew("shardgate_rejections_total", reason="rate_tokens") >= 1
    assert grew("shardgate_preemptions_total", model="sim-llama", **{"class": "0"}) == 1
    assert grew("shardgate_completion_tokens_total", tenant="lo", model="sim-llama") == 800
    assert grew("shardgate_time_to_first_token_seconds_count", model="sim-llama") >= 5
    assert grew("shardgate_inter_token_latency_seconds_count", model="sim-llama") >= 400
    assert grew("shardgate_queue_wait_seconds_count", model="sim-llama") >= 5
    assert after["shardgate_link_heartbeat_age_seconds"]
    samples_ = after

    # Every metric the Grafana dashboard queries exists on this live gateway, except the
    # sidecar's own (vllm:*, shardgate_sidecar_*) and series that need a priced model.
    dashboard = json.loads((ROOT / "deploy/grafana/shardgate.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    wanted = {n for e in exprs for n in metric_names(e)}
    wanted = {
        n
        for n in wanted
        if not n.startswith(("vllm:", "shardgate_sidecar_"))
        and n not in ("shardgate_cost_usd_total", "shardgate_tenant_budget_usd")
    }
    live = {name for name in samples_} | {
        name.removesuffix(suffix)
        for name in samples_
        for suffix in ("_bucket", "_count", "_sum", "_total")
    }
    assert wanted - live == set()
