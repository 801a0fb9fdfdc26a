"""Every answer names its request's id in `x-request-id`, through either HTTP path
(gateway.lean_http true and false): streamed or not, on every API, refusals too; a client's own
plain id is echoed, and the gateway's request log line carries the same id. A body over the
limit is refused naming the setting that moves it (gateway.max_body_bytes)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import orjson
import pytest
from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import gateway_pb2_grpc as pb_grpc

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster
from tests.integration.poll import until

GATEWAY_YAML = """
gateway:
  lean_http: {lean}
  max_body_bytes: 4096
  max_headers: 20
  default_max_tokens: 4
"""
ID = re.compile(r"^[0-9a-f]{32}$")  # (the gateway's own: gateway/ids.py)
MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = {"model": "sim-llama", "messages": MESSAGES, "max_tokens": 4}
COMPLETION = {"model": "sim-llama", "prompt": "hi", "max_tokens": 4}
# Streamed answers: (path, body, the answer's id of request id `rid`, or None: not from it).
STREAMS: dict[str, tuple[str, dict[str, Any], str | None]] = {
    "chat": ("/v1/chat/completions", CHAT, "chatcmpl-{rid}"),
    "completions": ("/v1/completions", COMPLETION, "cmpl-{rid}"),
    "chat-n2": ("/v1/chat/completions", {**CHAT, "n": 2}, "chatcmpl-{rid}"),
    "completions-n2": ("/v1/completions", {**COMPLETION, "n": 2}, "cmpl-{rid}"),
    "responses": ("/v1/responses", {"model": "sim-llama", "input": "hi"}, None),
    "responses-background": (
        "/v1/responses",
        {"model": "sim-llama", "input": "hi", "background": True},
        None,
    ),
    "anthropic": (
        "/v1/messages",
        {"model": "sim-llama", "max_tokens": 4, "messages": MESSAGES},
        "msg_{rid}",
    ),
}
LEAN_PATHS = ("/v1/chat/completions", "/v1/completions")


@pytest.fixture(scope="module", params=["false", "true"], ids=["aiohttp", "lean"])
def front(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    sim = SimConfig(model="sim-llama", profile="fast", max_model_len=4096)
    c = Cluster(GATEWAY_YAML.format(lean=request.param), [{"sim": sim}])
    c.start()
    yield c
    c.stop()


def lean(c: Cluster) -> bool:
    assert c.gateway is not None
    return c.gateway.config.gateway.lean_http


def stream(c: Cluster, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    """The whole streamed answer (read to its end)."""
    with httpx.stream(
        "POST", c.http_url + path, json={**body, "stream": True}, headers=headers, timeout=30
    ) as r:
        r.read()
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    if lean(c) and path in LEAN_PATHS:
        assert "server" not in r.headers  # the lean path's (aiohttp names itself)
    return r


def first_id(r: httpx.Response) -> str:
    """The `id` of the answer's first event that has one."""
    for line in r.text.splitlines():
        if line.startswith("data: {"):
            event = orjson.loads(line[6:])
            found = event.get("id") or event.get("message", {}).get("id")
            if found:
                return str(found)
    raise AssertionError(f"no id in {r.text[:300]!r}")


@pytest.mark.parametrize("name", list(STREAMS))
def test_a_streamed_answer_names_its_request_id(front: Cluster, name: str) -> None:
    path, body, answer_id = STREAMS[name]
    asked = f"client-{name}.1"
    echoed = stream(front, path, body, **{"x-request-id": asked})
    assert echoed.headers["x-request-id"] == asked
    made = stream(front, path, body)
    rid = made.headers["x-request-id"]
    assert ID.match(rid)
    if answer_id is not None:  # the answer's own id is made of the same one
        assert first_id(echoed) == answer_id.format(rid=asked)
        assert first_id(made) == answer_id.format(rid=rid)
    odd = stream(front, path, body, **{"x-request-id": "not plain!"})
    assert ID.match(odd.headers["x-request-id"])  # (not a plain short id: one of its own)


@pytest.mark.parametrize("n", [1, 2])
def test_the_request_log_lines_carry_the_answers_id(
    front: Cluster, caplog: pytest.LogCaptureFixture, n: int
) -> None:
    """One line per engine request: n > 1 choices are `<index>_<id>`."""
    caplog.set_level(logging.INFO, logger="shardgate.request")
    rid = stream(front, "/v1/chat/completions", {**CHAT, "n": n}).headers["x-request-id"]
    wanted = {rid} if n == 1 else {f"{i}_{rid}" for i in range(n)}

    def logged() -> set[str]:
        return {str(r.__dict__.get("id")) for r in caplog.records if r.name == "shardgate.request"}

    until(lambda: wanted <= logged(), 10.0, f"request log lines with ids {wanted}")


def test_refusals_name_their_request_id(front: Cluster) -> None:
    url = front.http_url
    unknown = {**CHAT, "model": "no-such-model", "stream": True}
    r = httpx.post(url + "/v1/chat/completions", json=unknown, headers={"x-request-id": "r-404"})
    assert (r.status_code, r.headers["x-request-id"]) == (404, "r-404")
    bad = httpx.post(url + "/v1/completions", content=b"{", headers={"x-request-id": "r-400"})
    assert (bad.status_code, bad.headers["x-request-id"]) == (400, "r-400")
    crowded = {f"x-extra-{i}": "1" for i in range(30)}  # over gateway.max_headers
    r = httpx.post(url + "/v1/chat/completions", json=CHAT, headers=crowded)
    assert r.status_code == 431
    assert ID.match(r.headers["x-request-id"])
    assert "gateway.max_headers" in r.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/responses"])
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_over_the_limit_names_the_setting(front: Cluster, path: str, framing: str) -> None:
    big = orjson.dumps({**CHAT, "messages": [{"role": "user", "content": "x" * 8192}]})
    content: bytes | Iterator[bytes] = big if framing == "content-length" else iter([big])
    r = httpx.post(front.http_url + path, content=content, headers={"x-request-id": "r-413"})
    assert (r.status_code, r.headers["x-request-id"]) == (413, "r-413")
    error = r.json()["error"]
    assert "gateway.max_body_bytes" in error["message"]
    assert "4096" in error["message"]


@pytest.mark.parametrize(
    ("asked", "echoed"), [("g-404", True), ("", False), ("not plain!", False), ("g-1\n", False)]
)
def test_a_grpc_refusal_names_its_request_id(front: Cluster, asked: str, echoed: bool) -> None:
    """A Generate refused before its first message (an unknown model) has its id in the
    trailers, as a stream has it in its first metadata."""
    req = pb.GenerateRequest(model="no-such-model", prompt="hi", max_tokens=2, request_id=asked)
    with grpc.insecure_channel(front.grpc_target) as ch, pytest.raises(grpc.RpcError) as e:
        list(pb_grpc.GatewayStub(ch).Generate(req, timeout=30))
    assert e.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
    rid = dict(e.value.trailing_metadata() or ())["x-request-id"]
    assert rid == asked if echoed else ID.match(rid)
