"""A client that goes away stops the engine work: watched through the sidecars' load reports."""

from __future__ import annotations

import http.client
import json
import time
from urllib.parse import urlsplit

import grpc
from shardgate.v1 import engine_pb2, engine_pb2_grpc
from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import gateway_pb2_grpc as pb_grpc

from tests.integration.cluster import Cluster

LONG = {"max_tokens": 3000, "ignore_eos": True}


def running(cluster: Cluster) -> int:
    total = 0
    for target in cluster.sidecar_targets():
        with grpc.insecure_channel(target) as ch:
            reply = engine_pb2_grpc.EngineStub(ch).Info(engine_pb2.InfoRequest(), timeout=5)
            total += reply.load.running + reply.load.waiting
    return total


def wait_for(cond: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def connect(
    cluster: Cluster, body: dict[str, object], timeout_s: float
) -> http.client.HTTPConnection:
    url = urlsplit(cluster.http_url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=timeout_s)
    conn.request(
        "POST",
        "/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    return conn


def test_http_disconnect_aborts_on_the_engine(cluster: Cluster) -> None:
    assert wait_for(lambda: running(cluster) == 0)
    body = {"model": "sim-llama", "prompt": "a long story", "stream": True, **LONG}
    conn = connect(cluster, body, 30)
    resp = conn.getresponse()
    assert resp.status == 200
    events = [line for line in (resp.readline() for _ in range(20)) if line.startswith(b"data:")]
    assert events
    assert running(cluster) == 1
    conn.close()
    # The connection is closed: the engine stops the request long before its 3000 tokens.
    assert wait_for(lambda: running(cluster) == 0, 5.0)


def test_http_disconnect_of_a_unary_request_aborts_too(cluster: Cluster) -> None:
    assert wait_for(lambda: running(cluster) == 0)
    body = {"model": "sim-llama", "prompt": "a long story", **LONG}
    conn = connect(cluster, body, 0.5)
    try:
        conn.getresponse()
    except TimeoutError:
        pass
    assert wait_for(lambda: running(cluster) == 1, 5.0)
    conn.close()
    assert wait_for(lambda: running(cluster) == 0, 5.0)


def test_grpc_cancel_aborts_on_the_engine(cluster: Cluster) -> None:
    assert wait_for(lambda: running(cluster) == 0)
    with grpc.insecure_channel(cluster.grpc_target) as ch:
        call = pb_grpc.GatewayStub(ch).Generate(
            pb.GenerateRequest(model="sim-llama", prompt="a long story", **LONG), timeout=60
        )
        got = [next(call) for _ in range(10)]
        assert all(r.token_ids for r in got)
        assert running(cluster) == 1
        call.cancel()
    assert wait_for(lambda: running(cluster) == 0, 5.0)
