"""Deadlines: no first output within `first_token_timeout_s`, or no end by `request_timeout_s`,
gets a 504 (a JSON error, an SSE error event, or DEADLINE_EXCEEDED), and the engine request is
aborted, even for a client that stopped reading."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import gateway_pb2_grpc as pb_grpc

from engine_sidecar.backends.sim import SimConfig, SimFaults
from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.integration.test_cancellation import running, wait_for

GATEWAY = "gateway: {request_timeout_s: 1.5, first_token_timeout_s: 0.5}"


@pytest.fixture(scope="module")
def slow() -> Iterator[Cluster]:
    """About 45 tokens/s: 3,000 tokens would take a minute."""
    c = Cluster(GATEWAY, [{"sim": SimConfig(profile="llama-70b-a100-tp8")}])
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def hung() -> Iterator[Cluster]:
    """An engine that stops before its first token (the no-output-at-all case is in
    tests/unit/runtime/test_job_deadline.py)."""
    sim = SimConfig(profile="fast", faults=SimFaults(hang_after_tokens=0))
    c = Cluster(GATEWAY, [{"sim": sim}])
    c.start()
    yield c
    c.stop()


def timeouts(c: Cluster) -> float:
    """The gateway's count of requests that ended at a deadline."""
    text = httpx.get(f"{c.http_url}/metrics", timeout=10).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "shardgate_requests_total" and s.labels.get("outcome") == "timeout"
    )


def chat(stream: bool, max_tokens: int = 3000) -> dict[str, object]:
    return {
        "model": "sim-llama",
        "messages": [{"role": "user", "content": "take your time"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
    }


def test_an_engine_that_hangs_gets_a_504_and_an_abort(hung: Cluster) -> None:
    r = httpx.post(f"{hung.http_url}/v1/chat/completions", json=chat(False), timeout=10)
    assert r.status_code == 504
    assert r.json()["error"]["type"] == "timeout"
    assert wait_for(lambda: running(hung) == 0, 5.0)


def test_a_unary_request_past_its_deadline_is_a_504(slow: Cluster) -> None:
    r = httpx.post(f"{slow.http_url}/v1/chat/completions", json=chat(False), timeout=10)
    assert r.status_code == 504
    assert "deadline" in r.json()["error"]["message"]
    assert wait_for(lambda: running(slow) == 0, 5.0)


def test_a_stream_past_its_deadline_ends_with_an_error_event(slow: Cluster) -> None:
    body = {**chat(True), "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{slow.http_url}/v1/chat/completions", json=body, timeout=10) as r:
        assert r.status_code == 200
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    parsed = [json.loads(e) for e in events[:-1]]
    tokens = sum(1 for p in parsed if p.get("choices") and p["choices"][0]["delta"].get("content"))
    assert 0 < tokens < 3000
    errors = [p["error"] for p in parsed if "error" in p]
    assert len(errors) == 1 and "deadline" in errors[0]["message"]
    usage = [p["usage"] for p in parsed if p.get("usage")]
    assert usage and usage[-1]["completion_tokens"] == tokens
    assert wait_for(lambda: running(slow) == 0, 5.0)


def test_grpc_past_its_deadline_is_deadline_exceeded(slow: Cluster) -> None:
    req = pb.GenerateRequest(model="sim-llama", prompt="take your time", max_tokens=3000)
    req.ignore_eos = True
    got = 0
    with grpc.insecure_channel(slow.grpc_target) as ch, pytest.raises(grpc.RpcError) as e:
        for msg in pb_grpc.GatewayStub(ch).Generate(req, timeout=10):
            got += len(msg.token_ids)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert 0 < got < 3000
    assert wait_for(lambda: running(slow) == 0, 5.0)


@pytest.mark.parametrize("lean", ["false", "true"], ids=["aiohttp", "lean"])
def test_a_client_that_stopped_reading_is_cut_off_at_the_deadline(lean: str) -> None:
    """A client that never reads a response of megabytes: the engine sends them and stalls
    (it is still on the request at the deadline, however fast this machine streams), the
    gateway's writes back up, and at the deadline the gateway lets go of the connection
    (instead of a handler holding the response until the client reads). With either HTTP path.
    (An engine that finished before the deadline: tests/unit/runtime/test_job_deadline.py.)"""
    faults = SimFaults(hang_after_tokens=50_000)  # ~7 MB of chunks
    sim = SimConfig(profile="instant", max_model_len=65536, num_kv_blocks=8192, faults=faults)
    c = Cluster(GATEWAY.replace("}", f", lean_http: {lean}}}"), [{"sim": sim}])
    c.start()
    try:
        url = urlsplit(c.http_url)
        body = json.dumps(chat(True, max_tokens=60_000)).encode()
        sock = socket.socket()
        sock.settimeout(10)
        # A small receive buffer, set before connect as tcp(7) asks: set after, the window the
        # kernel then advertises depends on the first segment's size, and the bytes the client
        # reads at the end (the cut-off stream the kernel still holds) may come at ~20 kB/s.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((url.hostname, url.port))
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        sock.sendall(head + body)
        assert c.gateway is not None
        pools = c.gateway.scheduler.pools

        def engine_done() -> bool:
            pool = pools.get("sim-llama")
            return pool is not None and not pool.running and running(c) == 0

        assert wait_for(engine_done, 10.0)
        # The gateway ends the request at its deadline (1.5 s) while the client still reads
        # nothing: the request is counted as timed out before the client reads a byte.
        until(lambda: timeouts(c) == 1, 10.0, "the request timed out")
        sock.settimeout(5)
        received = b""
        while data := sock.recv(1 << 16):
            received += data
        sock.close()
        assert received.startswith(b"HTTP/1.1 200")
        assert b"data: [DONE]" not in received[-200:]  # cut off, not finished
    finally:
        c.stop()
