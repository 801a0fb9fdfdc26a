"""Who keeps a stream: nobody by default (its bytes are what `vllm serve` sends: no `id:` lines,
no stream id); the request (`x-shardgate-resumable`, `stream_options.resumable`, gRPC
metadata), its tenant (`resumable_streams`) or its route (`gateway.resumable_streams`), the
first that says something winning. A bad header is a 400 naming it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import gateway_pb2_grpc as pb_grpc

from engine_sidecar.backends.sim import SimConfig
from gateway.streams.ask import RESUMABLE_HEADER
from gateway.streams.hub import STREAM_ID_HEADER
from tests.integration.cluster import Cluster

CONFIG = """
gateway: {default_max_tokens: 6, resumable_streams: [/v1/completions]}
tenants:
  - {name: keeps, keys: [sk-keeps], resumable_streams: true}
  - {name: plain, keys: [sk-plain]}
  - {name: never, keys: [sk-never], resumable_streams: false}
"""
CHAT = ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
COMPLETIONS = ("/v1/completions", {"prompt": "hi"})


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(CONFIG, [{"sim": SimConfig(model="sim-llama", profile="fast")}])
    c.start()
    yield c
    c.stop()


def stream(
    cluster: Cluster,
    key: str,
    route: tuple[str, dict[str, Any]],
    header: str | None = None,
    **fields: Any,
) -> tuple[httpx.Response, bytes]:
    path, body = route
    headers = {"authorization": f"Bearer {key}"}
    if header is not None:
        headers[RESUMABLE_HEADER] = header
    payload = {"model": "sim-llama", "stream": True, **body, **fields}
    url = cluster.http_url + path
    with (
        httpx.Client(timeout=30) as http,
        http.stream("POST", url, json=payload, headers=headers) as r,
    ):
        return r, r.read()


def is_kept(resp: httpx.Response, body: bytes) -> bool:
    assert resp.status_code == 200, body
    events = body.split(b"\n\n")
    assert events.pop() == b"" and events[-1].endswith(b"data: [DONE]")
    with_ids = [e for e in events if e.startswith(b"id: ")]
    if STREAM_ID_HEADER not in resp.headers:
        # what vllm serve sends: `data:` events only, nothing else on any line
        assert all(e.startswith(b"data: ") and b"\n" not in e for e in events), body
        return False
    assert len(with_ids) == len(events), body  # (every event has its id)
    return True


@pytest.mark.parametrize(
    ("key", "route", "header", "fields", "kept"),
    [
        ("sk-plain", CHAT, None, {}, False),  # nobody asked
        ("sk-plain", CHAT, "true", {}, True),  # the request's header
        ("sk-plain", CHAT, None, {"stream_options": {"resumable": True}}, True),  # its field
        ("sk-plain", CHAT, "false", {"stream_options": {"resumable": True}}, False),  # header wins
        ("sk-keeps", CHAT, None, {}, True),  # the tenant
        ("sk-keeps", CHAT, "0", {}, False),  # the request over the tenant
        ("sk-plain", COMPLETIONS, None, {}, True),  # the route list
        ("sk-never", COMPLETIONS, None, {}, False),  # the tenant over the route list
        ("sk-never", COMPLETIONS, "yes", {}, True),  # the request over both
    ],
)
def test_who_keeps_a_stream(
    cluster: Cluster,
    key: str,
    route: tuple[str, dict[str, Any]],
    header: str | None,
    fields: dict[str, Any],
    kept: bool,
) -> None:
    assert is_kept(*stream(cluster, key, route, header, **fields)) is kept


def test_a_bad_header_is_a_400_naming_it(cluster: Cluster) -> None:
    resp, body = stream(cluster, "sk-plain", CHAT, "maybe")
    assert resp.status_code == 400
    error = httpx.Response(400, content=body).json()["error"]
    assert error["param"] == RESUMABLE_HEADER
    assert RESUMABLE_HEADER in error["message"]


def test_a_bad_stream_options_resumable_is_a_400_naming_it(cluster: Cluster) -> None:
    resp, body = stream(cluster, "sk-plain", CHAT, stream_options={"resumable": "sure"})
    assert resp.status_code == 400
    assert "stream_options.resumable" in body.decode()


@pytest.mark.parametrize(("header", "kept"), [(None, False), ("true", True)])
def test_grpc_asks_in_its_metadata(cluster: Cluster, header: str | None, kept: bool) -> None:
    req = pb.GenerateRequest(model="sim-llama", prompt="hi", max_tokens=5)
    md = [("authorization", "Bearer sk-plain")]
    if header is not None:
        md.append((RESUMABLE_HEADER, header))
    with grpc.insecure_channel(cluster.grpc_target) as ch:
        call = pb_grpc.GatewayStub(ch).Generate(req, timeout=30, metadata=tuple(md))
        replies = list(call)
        initial = dict(call.initial_metadata())
    assert replies and replies[-1].finish_reason
    assert (STREAM_ID_HEADER in initial) is kept
    assert all(bool(r.stream_id) is kept for r in replies)


def test_grpc_refuses_a_bad_word(cluster: Cluster) -> None:
    req = pb.GenerateRequest(model="sim-llama", prompt="hi", max_tokens=5)
    md = (("authorization", "Bearer sk-plain"), (RESUMABLE_HEADER, "perhaps"))
    with grpc.insecure_channel(cluster.grpc_target) as ch, pytest.raises(grpc.RpcError) as e:
        list(pb_grpc.GatewayStub(ch).Generate(req, timeout=30, metadata=md))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert RESUMABLE_HEADER in (e.value.details() or "")
