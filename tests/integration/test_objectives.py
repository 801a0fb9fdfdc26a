"""Latency targets through the real API: a sheddable request that cannot make its TTFT target
is refused early (503 + Retry-After), at once or at its latest start; a higher class waits as
before; bad targets are a 400 (INVALID_ARGUMENT) naming the header (field); goodput counted."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc
import openai
import pytest
from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import gateway_pb2_grpc as pb_grpc

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.integration.test_tenants import samples, total

CONFIG = """
gateway: {default_max_tokens: 16, keepalive_s: 0.2}
model_capacity: {sim-llama: 1}
tenants:
  - {name: interactive, keys: [sk-int], default_priority: 1}
  - {name: batch, keys: [sk-batch], default_priority: -1}
scheduling:
  default: {max_depth: 10, max_wait_s: 60}
"""
PROMPT = [{"role": "user", "content": "Tell me a long story."}]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(CONFIG, [{"sim": SimConfig(model="sim-llama", profile="fast")}])
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def clients(cluster: Cluster) -> Iterator[dict[str, openai.OpenAI]]:
    out = {
        key: openai.OpenAI(
            base_url=f"{cluster.http_url}/v1", api_key=key, max_retries=0, timeout=60
        )
        for key in ("sk-int", "sk-batch")
    }
    yield out
    for c in out.values():
        c.close()


def chat(clients: dict[str, openai.OpenAI], key: str, max_tokens: int, **headers: str) -> Any:
    return clients[key].chat.completions.with_raw_response.create(
        model="sim-llama",
        messages=PROMPT,
        max_tokens=max_tokens,
        extra_body={"ignore_eos": True},
        extra_headers=headers,
    )


def test_a_target_that_is_no_number_is_a_400_naming_its_header(
    clients: dict[str, openai.OpenAI],
) -> None:
    for name, value in [("x-slo-ttft-ms", "soon"), ("x-slo-tpot-ms", "0")]:
        with pytest.raises(openai.BadRequestError) as e:
            chat(clients, "sk-int", 2, **{name: value})
        assert e.value.response.json()["error"]["param"] == name


def test_grpc_takes_the_same_fields(cluster: Cluster) -> None:
    meta = (("authorization", "Bearer sk-int"),)
    with grpc.insecure_channel(cluster.grpc_target) as ch:
        stub = pb_grpc.GatewayStub(ch)
        bad = pb.GenerateRequest(model="sim-llama", prompt="hi", max_tokens=2, slo_ttft_ms=-1)
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Generate(bad, metadata=meta, timeout=10))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "x-slo-ttft-ms" in (e.value.details() or "")
        ok = pb.GenerateRequest(model="sim-llama", prompt="hi", max_tokens=2, slo_ttft_ms=5000)
        assert list(stub.Generate(ok, metadata=meta, timeout=10))


def test_a_sheddable_request_that_cannot_make_its_target_is_refused_early(
    cluster: Cluster, clients: dict[str, openai.OpenAI]
) -> None:
    assert cluster.gateway is not None
    pool_of = cluster.gateway.scheduler.pools
    # The replica's models learn from requests that finished on it (twice their features).
    for _ in range(12):
        chat(clients, "sk-int", 2)
    before = samples(cluster)

    # An interactive stream holds the only slot (class 1: no batch request preempts it).
    started, done = threading.Event(), threading.Event()

    def blocker() -> None:
        raw = clients["sk-int"].chat.completions.create(
            model="sim-llama",
            messages=PROMPT,
            max_tokens=3000,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        for _ in raw:
            started.set()
        done.set()

    t = threading.Thread(target=blocker)
    t.start()
    assert started.wait(30)

    # A target no replica can make: refused at once, while the blocker still runs.
    with pytest.raises(openai.InternalServerError) as e:
        chat(clients, "sk-batch", 4, **{"x-slo-ttft-ms": "1"})
    assert e.value.status_code == 503
    assert int(e.value.response.headers["retry-after"]) >= 1
    assert "time-to-first-token objective" in e.value.response.json()["error"]["message"]
    assert not done.is_set()

    # A target it could make if a slot freed soon: it waits, then is refused at its latest
    # start, still before the blocker ends. A batch request with no target waits on.
    outcome: dict[str, Any] = {}

    def queued(name: str, **headers: str) -> None:
        try:
            outcome[name] = chat(clients, "sk-batch", 4, **headers).status_code
        except openai.APIStatusError as err:
            outcome[name] = err

    waiters = [
        threading.Thread(target=queued, args=("late",), kwargs={"x-slo-ttft-ms": "300"}),
        threading.Thread(target=queued, args=("patient",)),
    ]
    for w in waiters:
        w.start()
    until(lambda: len(pool_of["sim-llama"].queue) == 2, 10, "both batch requests queued")
    waiters[0].join(20)
    late = outcome["late"]
    assert isinstance(late, openai.InternalServerError) and late.status_code == 503
    assert "retry-after" in late.response.headers
    assert not done.is_set(), "the late request was refused only when the slot freed"

    # A higher class is never shed: it waits for the slot and is served, late.
    higher: dict[str, Any] = {}
    hi = threading.Thread(
        target=lambda: higher.update(r=chat(clients, "sk-int", 4, **{"x-slo-ttft-ms": "1"}))
    )
    hi.start()
    until(lambda: len(pool_of["sim-llama"].queue) == 2, 10, "the interactive request queued")
    for th in (t, hi, waiters[1]):
        th.join(60)
    assert higher["r"].status_code == 200
    assert outcome["patient"] == 200

    after = samples(cluster)

    def grew(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    objective = "shardgate_objective_requests_total"
    assert grew(objective, tenant="batch", result="refused") == 2
    assert grew(objective, tenant="interactive", result="missed") == 1  # (TTFT over 1 ms)
    assert grew(objective, tenant="interactive", result="met") == 0
    assert grew("shardgate_rejections_total", reason="objective", code="503") == 2
    assert grew("shardgate_prediction_error_ratio_count", figure="ttft") >= 1
