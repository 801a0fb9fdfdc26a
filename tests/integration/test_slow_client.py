"""Streams to clients that lag, and streams without direct writes.

A client that stops reading while the engine streams gets its deltas merged (at most
`max_pending_deltas` held per request), then, when it reads again, the whole text. With
`direct_writes: false` every frame goes through the request's own task: the client gets the
same stream as with direct writes. Both with aiohttp alone and with the lean path in front."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from engine_sidecar.backends.sim import SimConfig
from gateway.runtime.job import Job
from tests.integration.cluster import Cluster
from tests.integration.poll import until

MAX_PENDING = 8
LONG = 40_000  # ~7 MB of SSE: more than the sockets between gateway and client buffer


class SmallWindow(http.client.HTTPConnection):
    """A client with a small receive buffer, set before it connects (tcp(7): set after, the
    window the kernel advertises depends on the first segment's size, and the bytes the
    sockets hold may then come at ~20 kB/s)."""

    def connect(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(self.timeout)
        self.sock.connect((self.host, self.port))


def chat(max_tokens: int, prompt: str = "Go on and on.", stream: bool = True) -> dict[str, Any]:
    return {
        "model": "sim-llama",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
        "stream_options": {"include_usage": True} if stream else None,
    }


def start(direct: bool, sim: SimConfig, lean: bool = False) -> Cluster:
    gateway = (
        f"gateway: {{max_pending_deltas: {MAX_PENDING}, "
        f"direct_writes: {'true' if direct else 'false'}, "
        f"lean_http: {'true' if lean else 'false'}}}"
    )
    c = Cluster(gateway, [{"sim": sim}])
    c.start()
    return c


# Each test with aiohttp alone and with the lean path in front of it (gateway.lean_http).
@pytest.fixture(params=[False, True], ids=["aiohttp", "lean"])
def big(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    sim = SimConfig(profile="instant", max_model_len=65536, num_kv_blocks=8192)
    c = start(True, sim, request.param)
    yield c
    c.stop()


def parse(lines: Iterator[str]) -> tuple[list[str], str | None, dict[str, Any] | None]:
    """(content pieces, finish reason, usage) of an SSE chat stream; fails on an error event."""
    pieces: list[str] = []
    finish, usage = None, None
    for line in lines:
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        assert "error" not in event, event
        for choice in event.get("choices") or ():
            if choice["delta"].get("content"):
                pieces.append(choice["delta"]["content"])
            finish = choice.get("finish_reason") or finish
        usage = event.get("usage") or usage
    return pieces, finish, usage


def running_jobs(c: Cluster) -> list[Job]:
    assert c.gateway is not None
    pool = c.gateway.scheduler.pools.get("sim-llama")

    async def snapshot() -> list[Job]:
        return list(pool.running) if pool is not None else []

    return c.run(snapshot())


def test_a_client_that_stops_reading_gets_merged_deltas_then_the_whole_text(
    big: Cluster,
) -> None:
    url = f"{big.http_url}/v1/chat/completions"
    unary = httpx.post(url, json=chat(LONG, stream=False), timeout=120).json()
    reference = unary["choices"][0]["message"]["content"]
    conn = SmallWindow(urlsplit(big.http_url).netloc, timeout=120)
    body = json.dumps(chat(LONG))
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    try:
        r = conn.getresponse()
        assert r.status == 200
        until(lambda: running_jobs(big), 10.0, "the request runs")
        [job] = running_jobs(big)
        held = 0

        def engine_done() -> bool:
            nonlocal held
            held = max(held, len(job.out.pending))
            return job.out.done

        # Not reading: the engine finishes while the gateway holds what the sockets cannot.
        until(engine_done, 60.0, "the engine finished the request")
        assert 1 <= held <= MAX_PENDING + 1
        pieces, finish, usage = parse(line.decode().rstrip("\r\n") for line in r)
    finally:
        conn.close()
    assert "".join(pieces) == reference
    assert finish == "length"
    assert usage is not None and usage["completion_tokens"] == LONG
    assert len(pieces) < LONG  # some deltas left merged


@pytest.fixture(scope="module", params=[False, True], ids=["aiohttp", "lean"])
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[Cluster, Cluster]]:
    sim = SimConfig(profile="fast")
    direct, through_task = start(True, sim, request.param), start(False, sim, request.param)
    yield direct, through_task
    direct.stop()
    through_task.stop()


def streams(c: Cluster, prompts: list[str], tokens: int) -> dict[str, Any]:
    """Concurrent streams, one per prompt: {prompt: (pieces, finish, usage)}."""
    out: dict[str, Any] = {}

    def run(prompt: str) -> None:
        body = chat(tokens, prompt)
        with httpx.stream("POST", f"{c.http_url}/v1/chat/completions", json=body, timeout=60) as r:
            assert r.status_code == 200
            out[prompt] = parse(r.iter_lines())

    threads = [threading.Thread(target=run, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert set(out) == set(prompts)
    return out


def test_without_direct_writes_the_streams_are_the_same(pair: tuple[Cluster, Cluster]) -> None:
    direct, through_task = pair
    prompts = [f"Prompt {i}: tell me more." for i in range(4)]
    url = f"{direct.http_url}/v1/chat/completions"
    reference = {
        p: httpx.post(url, json=chat(300, p, stream=False), timeout=60).json()["choices"][0][
            "message"
        ]["content"]
        for p in prompts
    }
    a, b = streams(direct, prompts, 300), streams(through_task, prompts, 300)
    for p in prompts:
        pieces, finish, usage = b[p]
        assert "".join(pieces) == reference[p]
        assert (finish, usage["completion_tokens"]) == ("length", 300)
        assert usage == a[p][2]
        assert "".join(a[p][0]) == reference[p]
        assert a[p][1] == finish
