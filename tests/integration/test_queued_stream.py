"""A request that waits in its pool's queue, as its client sees it: a streamed one gets its
headers and `: keep-alive` comments only, and its role chunk leaves with its first token; the
first-output limit counts from the moment it reaches an engine, not from its arrival; and every
response names the replica that took it."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator

import openai
import pytest

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster
from tests.integration.poll import until

CONFIG = """
gateway: {default_max_tokens: 16, keepalive_s: %s, first_token_timeout_s: 0.3}
model_capacity: {sim-llama: 1}
"""
PROMPT = [{"role": "user", "content": "Tell me a story."}]


def cluster_with(keepalive_s: float) -> Iterator[Cluster]:
    c = Cluster(CONFIG % keepalive_s, [{"sim": SimConfig(model="sim-llama", profile="fast")}])
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def beating() -> Iterator[Cluster]:
    yield from cluster_with(0.05)


@pytest.fixture(scope="module")
def quiet() -> Iterator[Cluster]:
    yield from cluster_with(60)


class Stream:
    """A raw streaming request over a socket: what the client really receives, comments
    included, in order."""

    def __init__(self, cluster: Cluster, max_tokens: int) -> None:
        assert cluster.gateway is not None
        self.sock = socket.create_connection(("127.0.0.1", cluster.gateway.http_port), 10)
        body = json.dumps(
            {
                "model": "sim-llama",
                "messages": PROMPT,
                "max_tokens": max_tokens,
                "stream": True,
                "ignore_eos": True,
            }
        ).encode()
        self.sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        self.raw = b""
        self.head = b""
        self.events: list[bytes] = []  # SSE events and comments, as they came

    def read(self) -> bool:
        """One recv(); False at the end of the stream."""
        data = self.sock.recv(65536)
        if not data:
            return False
        self.raw += data
        if not self.head:
            if b"\r\n\r\n" not in self.raw:
                return True
            self.head, self.raw = self.raw.split(b"\r\n\r\n", 1)
        body = b""
        rest = self.raw
        while True:  # chunked transfer coding
            size_line, sep, after = rest.partition(b"\r\n")
            if not sep:
                break
            size = int(size_line, 16)
            if len(after) < size + 2:
                break
            body += after[:size]
            rest = after[size + 2 :]
            if size == 0:
                break
        # (an event's `id:` line, its place in the stream store, is not what these tests read)
        self.events = [re.sub(rb"^id: [^\n]*\n", b"", e) for e in body.split(b"\n\n") if e]
        return not self.raw.endswith(b"0\r\n\r\n")

    def read_until(self, done: object, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not done(self):  # type: ignore[operator]
            assert time.monotonic() < deadline, f"waited for: {self.events[-5:]}"
            if not self.read():
                return

    def close(self) -> None:
        self.sock.close()

    def header(self, name: str) -> str | None:
        for line in self.head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == name.encode():
                return v.strip().decode()
        return None


def keepalives(s: Stream) -> int:
    return sum(1 for e in s.events if e == b": keep-alive")


def blocker(cluster: Cluster) -> Stream:
    """A stream that holds the pool's only slot until it is closed."""
    b = Stream(cluster, 4000)  # ~8 s at the fast profile: closed long before
    b.read_until(lambda s: any(e.startswith(b"data: ") for e in s.events))
    return b


def test_a_queued_stream_gets_headers_and_keepalives_then_its_role_with_its_first_token(
    beating: Cluster,
) -> None:
    hold = blocker(beating)
    queued = Stream(beating, 8)
    try:
        queued.read_until(lambda s: keepalives(s) >= 3)  # waiting, and told so
        assert queued.head.startswith(b"HTTP/1.1 200")
        assert not [e for e in queued.events if not e.startswith(b":")]  # nothing else yet
        assert queued.header("x-shardgate-replica") is None  # not placed when the head left
    finally:
        hold.close()  # the slot frees: the queued request is placed
    queued.read_until(lambda s: s.events[-1:] == [b"data: [DONE]"])
    data = [e for e in queued.events if not e.startswith(b":")]
    comments = [e for e in queued.events if e.startswith(b":")]
    first_data = queued.events.index(data[0])
    # Every comment came before the first chunk; the replica is named before it too.
    assert queued.events[:first_data] == comments
    assert comments[-1].startswith(b": x-shardgate-replica: 127.0.0.1:")
    role = json.loads(data[0][len(b"data: ") :])
    assert role["choices"][0]["delta"]["role"] == "assistant"
    first = json.loads(data[1][len(b"data: ") :])
    assert first["choices"][0]["delta"]["content"]
    queued.close()


def test_time_in_the_queue_does_not_count_toward_the_first_token_limit(quiet: Cluster) -> None:
    """first_token_timeout_s is 0.3 s; the request waits longer than that behind a blocker,
    then is served whole (no keep-alive is due: keepalive_s is 60)."""
    assert quiet.gateway is not None
    pool_queue = lambda: quiet.gateway.scheduler.pools["sim-llama"].queue  # noqa: E731
    hold = blocker(quiet)
    result: dict[str, object] = {}

    def unary() -> None:
        with openai.OpenAI(
            base_url=f"{quiet.http_url}/v1", api_key="none", max_retries=0, timeout=30
        ) as client:
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model="sim-llama",
                    messages=PROMPT,
                    max_tokens=8,
                    extra_body={"ignore_eos": True},
                )
                result["replica"] = raw.headers.get("x-shardgate-replica")
                result["tokens"] = raw.parse().usage.completion_tokens  # type: ignore[union-attr]
            except openai.APIStatusError as e:
                result["error"] = e

    t = threading.Thread(target=unary)
    t.start()
    try:
        until(lambda: len(pool_queue()) == 1, 30.0, "the request queued behind the blocker")
        queued_at = time.monotonic()
        # Past the first-token limit while still queued (waiting for elapsed time is the point).
        while time.monotonic() - queued_at < 3 * 0.3:
            assert len(pool_queue()) == 1 and t.is_alive()
            time.sleep(0.05)
    finally:
        hold.close()
    t.join(30)
    assert "error" not in result, result.get("error")
    assert result["tokens"] == 8
    assert str(result["replica"]).startswith("127.0.0.1:")  # named, though it was queued
