"""Streams that survive their client: a stream dropped mid-way and resumed through
GET /v1/streams/{id} (and gRPC Resume) equals an undisturbed run; only its tenant finds it;
a new reader replaces the one before; a detached request runs for detach_grace_s, then stops."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import urlsplit

import grpc
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionChunk
from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import gateway_pb2_grpc as pb_grpc

from engine_sidecar.backends.sim import SimConfig
from gateway.streams.store import REPLAY_BATCH
from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.integration.test_cancellation import running

GATEWAY_YAML = """
gateway:
  default_max_tokens: 64
  detach_grace_s: 1.5
tenants:
  - {name: alpha, keys: [sk-alpha], resumable_streams: true}
  - {name: beta, keys: [sk-beta], resumable_streams: true}
"""
MESSAGES = [{"role": "user", "content": "tell me a long story"}]
LONG = {"max_tokens": 3000, "ignore_eos": True, "seed": 7}


@pytest.fixture(scope="module")
def kept() -> Iterator[Cluster]:
    sim = SimConfig(model="sim-llama", profile="fast", max_model_len=8192)
    c = Cluster(GATEWAY_YAML, [{"sim": sim}])
    c.start()
    yield c
    c.stop()


def client(cluster: Cluster, key: str = "sk-alpha") -> openai.OpenAI:
    return openai.OpenAI(base_url=cluster.http_url + "/v1", api_key=key, max_retries=0)


def post_stream(
    cluster: Cluster, body: dict[str, object], key: str = "sk-alpha"
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    url = urlsplit(cluster.http_url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn.request("POST", "/v1/chat/completions", json.dumps(body).encode(), headers)
    resp = conn.getresponse()
    assert resp.status == 200
    return conn, resp


def read_events(resp: http.client.HTTPResponse, count: int | None = None) -> list[tuple[str, str]]:
    """(id, data) of the next `count` SSE events (all, to the end, with None)."""
    out: list[tuple[str, str]] = []
    ident = ""
    while count is None or len(out) < count:
        line = resp.readline()
        if not line:
            break
        text = line.decode().rstrip("\n")
        if text.startswith("id: "):
            ident = text[4:]
        elif text.startswith("data: "):
            out.append((ident, text[6:]))
            ident = ""
    return out


def text_of(events: list[tuple[str, str]]) -> str:
    parts = []
    for _, data in events:
        if data == "[DONE]":
            continue
        choices = json.loads(data).get("choices", [])
        parts.extend(choice["delta"].get("content") or "" for choice in choices)
    return "".join(parts)


def reattach(
    cluster: Cluster, sid: str, key: str = "sk-alpha", last: str | None = None
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    url = urlsplit(cluster.http_url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    headers = {"Authorization": f"Bearer {key}"}
    if last is not None:
        headers["Last-Event-ID"] = last
    conn.request("GET", f"/v1/streams/{sid}", headers=headers)
    return conn, conn.getresponse()


def whole_text(cluster: Cluster, max_tokens: int, ignore_eos: bool = False) -> str:
    with client(cluster) as api:
        stream = api.chat.completions.create(
            model="sim-llama",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
            max_tokens=max_tokens,
            seed=7,
            extra_body={"ignore_eos": ignore_eos},
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_sdk_stream_dropped_and_resumed_equals_an_undisturbed_run(kept: Cluster) -> None:
    whole = whole_text(kept, 200)
    api = client(kept)
    raw = api.chat.completions.with_raw_response.create(
        model="sim-llama",
        messages=MESSAGES,
        stream=True,
        max_tokens=200,
        seed=7,  # type: ignore[arg-type]
    )
    sid = raw.headers["x-shardgate-stream-id"]
    stream = raw.parse()
    first = []
    for chunk in stream:
        first.append(chunk)
        if len(first) == 20:
            break
    stream.close()  # the client drops mid-way
    got = "".join(c.choices[0].delta.content or "" for c in first if c.choices)
    # The SDK, reattached with the id of the last event it read (one per chunk, from 1).
    rest = api.get(
        f"/streams/{sid}",
        cast_to=ChatCompletionChunk,
        stream=True,
        stream_cls=openai.Stream[ChatCompletionChunk],
        options={"headers": {"Last-Event-ID": f"{sid}:{len(first)}"}},
    )
    got += "".join(c.choices[0].delta.content or "" for c in rest if c.choices)
    api.close()
    assert got == whole
    assert len(whole) > 100


def test_raw_http_drop_and_resume_live_has_no_gap_and_no_duplicate(kept: Cluster) -> None:
    whole = whole_text(kept, 1500)
    body = {"model": "sim-llama", "messages": MESSAGES, "stream": True, "max_tokens": 1500,
            "seed": 7}  # fmt: skip
    conn, resp = post_stream(kept, body)
    sid = resp.headers["x-shardgate-stream-id"]
    head = read_events(resp, 10)
    conn.close()  # the client drops mid-way
    last = head[-1][0]
    assert last == f"{sid}:10"
    conn2, resp2 = reattach(kept, sid, last=last)
    assert resp2.status == 200
    tail = read_events(resp2)
    conn2.close()
    ids = [int(i.rpartition(":")[2]) for i, _ in head + tail]
    assert ids == list(range(1, len(ids) + 1))  # every event once, in order
    assert tail[-1][1] == "[DONE]"
    assert text_of(head + tail) == whole


def test_after_query_and_bad_ids(kept: Cluster) -> None:
    body = {"model": "sim-llama", "messages": MESSAGES, "stream": True, "max_tokens": 20}
    conn, resp = post_stream(kept, body)
    sid = resp.headers["x-shardgate-stream-id"]
    events = read_events(resp)
    conn.close()
    with httpx.Client(base_url=kept.http_url, timeout=30) as h:
        auth = {"Authorization": "Bearer sk-alpha"}
        r = h.get(f"/v1/streams/{sid}", params={"after": 3}, headers=auth)
        assert r.status_code == 200
        assert r.text.startswith(f"id: {sid}:4\n")
        assert r.text.encode() == "".join(f"id: {i}\ndata: {d}\n\n" for i, d in events[3:]).encode()
        for params, headers, field in (
            ({"after": "-1"}, {}, "after"),
            ({"after": "x"}, {}, "after"),
            ({}, {"Last-Event-ID": "st_other:3"}, "Last-Event-ID"),
        ):
            r = h.get(f"/v1/streams/{sid}", params=params, headers={**auth, **headers})
            assert r.status_code == 400
            assert r.json()["error"]["param"] == field


def test_another_tenant_and_an_unknown_id_get_404(kept: Cluster) -> None:
    body = {"model": "sim-llama", "messages": MESSAGES, "stream": True, "max_tokens": 20}
    conn, resp = post_stream(kept, body)
    sid = resp.headers["x-shardgate-stream-id"]
    read_events(resp)
    conn.close()
    with httpx.Client(base_url=kept.http_url, timeout=30) as h:
        assert h.get(f"/v1/streams/{sid}", headers={"Authorization": "Bearer sk-alpha"}).is_success
        other = h.get(f"/v1/streams/{sid}", headers={"Authorization": "Bearer sk-beta"})
        assert other.status_code == 404
        assert other.json()["error"]["type"] == "not_found_error"
        unknown = h.get("/v1/streams/st_nope", headers={"Authorization": "Bearer sk-alpha"})
        assert unknown.status_code == 404
        assert h.get(f"/v1/streams/{sid}").status_code == 401


def test_a_second_reader_replaces_the_first(kept: Cluster) -> None:
    until(lambda: running(kept) == 0, what="an idle engine")
    body = {"model": "sim-llama", "messages": MESSAGES, "stream": True, **LONG}
    conn, resp = post_stream(kept, body)
    sid = resp.headers["x-shardgate-stream-id"]
    read_events(resp, 3)
    c1, r1 = reattach(kept, sid, last=f"{sid}:3")
    first = read_events(r1, 5)
    # The stream's own client was replaced by the first reader: its response ends.
    read_events(resp)
    conn.close()
    c2, r2 = reattach(kept, sid, last=first[-1][0])
    assert r2.status == 200
    second = read_events(r2, 5)
    rest_of_first = read_events(r1)  # the first reader's response ends, cut short
    assert not rest_of_first or rest_of_first[-1][1] != "[DONE]"
    c1.close()
    ids = [int(i.rpartition(":")[2]) for i, _ in first + second]
    assert ids[:6] == list(range(4, 10))
    c2.close()
    # Nobody reads it any more: after the grace the engine request stops.
    until(lambda: running(kept) == 0, 15.0, "the abandoned request aborted")


def abandoned(
    kept: Cluster, body: dict[str, object], events: int, requests: int
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], float]:
    """A stream whose client leaves after `events` events and never comes back: its engine
    requests (`requests` of them) keep generating for the grace, then are aborted; its events
    before the drop and after it (read back once it ended with `client_gone`), and the tokens
    settled meanwhile."""
    until(lambda: running(kept) == 0, what="an idle engine")
    settled = metric(kept, "shardgate_completion_tokens_total", tenant="alpha", model="sim-llama")
    conn, resp = post_stream(kept, body)
    sid = resp.headers["x-shardgate-stream-id"]
    head = read_events(resp, events)
    conn.close()
    assert kept.gateway is not None
    log = kept.gateway.streams.store.logs[sid]
    seen = int(head[-1][0].rpartition(":")[2])
    # It keeps generating with nobody attached ...
    until(lambda: log.next_seq > seen + 50, what="events produced while detached")
    assert running(kept) == requests
    # ... until the grace is over: then its engine requests are aborted, well before the end.
    until(lambda: running(kept) == 0, 20.0, "the detached requests aborted")
    until(lambda: log.finished, what="the stream ended")
    conn2, resp2 = reattach(kept, sid, last=head[-1][0])
    tail = read_events(resp2)
    conn2.close()
    assert json.loads(tail[-2][1])["error"]["type"] == "client_gone"
    assert tail[-1][1] == "[DONE]"
    now = metric(kept, "shardgate_completion_tokens_total", tenant="alpha", model="sim-llama")
    return head, tail, now - settled


def test_a_detached_request_runs_for_the_grace_then_stops(kept: Cluster) -> None:
    body = {"model": "sim-llama", "messages": MESSAGES, "stream": True, **LONG}
    head, tail, settled = abandoned(kept, body, 5, 1)
    # The tokens it generated are settled (billed) as for any client that leaves.
    assert settled >= len(head + tail) - 3  # (less the role chunk, error and [DONE])
    completed = text_of(head + tail[:-2])
    assert len(completed) > 50
    assert completed == whole_text(kept, 3000, ignore_eos=True)[: len(completed)]


def test_grpc_resume_continues_after_the_last_seq(kept: Cluster) -> None:
    req = pb.GenerateRequest(model="sim-llama", prompt="a long story", max_tokens=400, seed=3)
    with grpc.insecure_channel(kept.grpc_target) as ch:
        stub = pb_grpc.GatewayStub(ch)
        md = (("authorization", "Bearer sk-alpha"),)
        whole = [t for r in stub.Generate(req, timeout=60, metadata=md) for t in r.token_ids]
        call = stub.Generate(req, timeout=60, metadata=md)
        head = [next(call) for _ in range(10)]
        call.cancel()
        sid = head[0].stream_id
        assert sid and [r.seq for r in head] == list(range(1, 11))
        other = stub.Resume(
            pb.ResumeRequest(stream_id=sid, after_seq=10),
            timeout=60,
            metadata=(("authorization", "Bearer sk-beta"),),
        )
        with pytest.raises(grpc.RpcError) as e:
            next(other)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        tail = list(
            stub.Resume(pb.ResumeRequest(stream_id=sid, after_seq=10), timeout=60, metadata=md)
        )
    assert [r.seq for r in tail] == list(range(11, 11 + len(tail)))
    assert tail[-1].finish_reason in ("stop", "length")
    assert [t for r in head + tail for t in r.token_ids] == whole


def metric(cluster: Cluster, name: str, **labels: str) -> float:
    """The value of one series on the gateway's /metrics (0 when absent)."""
    text = httpx.get(cluster.http_url + "/metrics", timeout=10).text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        head, _, rest = series.partition("{")
        if head == name and ",".join(sorted(rest.rstrip("}").split(","))) == want:
            return float(value)
    return 0.0


def test_the_store_reports_its_size_and_resumes(kept: Cluster) -> None:
    body = {"model": "sim-llama", "messages": MESSAGES, "stream": True, "max_tokens": 20}
    before = metric(kept, "shardgate_stream_resumes_total", api="http")
    conn, resp = post_stream(kept, body)
    sid = resp.headers["x-shardgate-stream-id"]
    read_events(resp)
    conn.close()
    assert metric(kept, "shardgate_stream_store_streams") >= 1
    assert metric(kept, "shardgate_stream_store_bytes") > 0
    c, r = reattach(kept, sid)
    read_events(r)
    c.close()
    assert metric(kept, "shardgate_stream_resumes_total", api="http") == before + 1


TIGHT_YAML = """
gateway:
  default_max_tokens: 64
  streams: {max_streams: 1}
  resumable_streams: ["/v1/chat/completions", "/v1/completions", "shardgate.v1.Gateway/Generate"]
"""


@pytest.fixture(scope="module")
def tight() -> Iterator[Cluster]:
    sim = SimConfig(model="sim-llama", profile="fast", max_model_len=8192)
    c = Cluster(TIGHT_YAML, [{"sim": sim}])
    c.start()
    yield c
    c.stop()


def test_a_full_store_serves_new_streams_without_resume_and_says_so(tight: Cluster) -> None:
    until(lambda: running(tight) == 0, what="an idle engine")
    body = {"model": "sim-llama", "messages": MESSAGES, "stream": True, **LONG}
    conn, resp = post_stream(tight, body, key="")
    assert resp.headers["x-shardgate-stream-id"]
    read_events(resp, 3)
    short = {"model": "sim-llama", "messages": MESSAGES, "stream": True, "max_tokens": 20}
    with httpx.Client(base_url=tight.http_url, timeout=30) as h:
        r = h.post("/v1/chat/completions", json=short)
        assert r.headers["x-shardgate-stream-resume"] == "unavailable"
        assert "x-shardgate-stream-id" not in r.headers
        assert "id: " not in r.text and r.text.endswith("data: [DONE]\n\n")
        assert metric(tight, "shardgate_stream_unkept_total") >= 1
    conn.close()
    # detach_grace_s 0 (the default): the engine request is aborted at once, as before.
    until(lambda: running(tight) == 0, 5.0, "the request aborted with its client")
    assert tight.gateway is not None and len(tight.gateway.streams.detached) == 0
    with httpx.Client(base_url=tight.http_url, timeout=30) as h:
        r = h.post("/v1/chat/completions", json=short)  # the store has room again
        assert r.headers["x-shardgate-stream-id"]


def test_reading_a_finished_stream_leaves_its_clients_connection_alone(kept: Cluster) -> None:
    """The connection that carried a finished stream may carry the client's next request: a
    reader of the finished stream replaces nobody there."""
    short = {"model": "sim-llama", "messages": MESSAGES, "stream": True, "max_tokens": 20}
    url = urlsplit(kept.http_url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-alpha"}
    conn.request("POST", "/v1/chat/completions", json.dumps(short).encode(), headers)
    first = conn.getresponse()
    sid = first.headers["x-shardgate-stream-id"]
    assert read_events(first)[-1][1] == "[DONE]"
    first.read()
    conn.request("POST", "/v1/chat/completions", json.dumps({**short, "max_tokens": 200}), headers)
    second = conn.getresponse()  # the same keep-alive connection
    head = read_events(second, 3)
    c, r = reattach(kept, sid)
    assert read_events(r)[-1][1] == "[DONE]"
    c.close()
    rest = read_events(second)
    conn.close()
    assert rest and rest[-1][1] == "[DONE]"
    assert len(head + rest) > 20


DRILL_YAML = """
gateway:
  default_max_tokens: 64
  detach_grace_s: 30
  streams: {max_bytes: 4194304, max_stream_bytes: 65536, retention_s: 60}
tenants:
  - {name: alpha, keys: [sk-alpha], resumable_streams: true}
"""
DRILL_STREAMS = 200


@pytest.fixture(scope="module")
def drill() -> Iterator[Cluster]:
    sim = SimConfig(model="sim-llama", profile="fast", max_model_len=8192)
    c = Cluster(DRILL_YAML, [{"sim": sim}, {"sim": sim}])
    c.start()
    yield c
    c.stop()


def test_drill_200_streams_dropped_at_random_points_and_reattached(drill: Cluster) -> None:
    """Each client drops its stream after a random number of events (some before any token,
    some in the middle, some after the end) and reattaches with its Last-Event-ID: every text
    equals the undisturbed run's, none is lost, and the store stays within its bounds."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(20261201)
    plans = [(seed, rng.randint(1, 70)) for seed in range(DRILL_STREAMS)]
    api = client(drill)

    def one(seed: int, drop_after: int) -> tuple[str, str]:
        fields = {"max_tokens": 60, "seed": seed, "temperature": 1.0}
        whole = api.chat.completions.create(
            model="sim-llama", messages=MESSAGES, extra_body={"ignore_eos": True}, **fields
        )
        body = {"model": "sim-llama", "messages": MESSAGES, "stream": True, "ignore_eos": True,
                **fields}  # fmt: skip
        conn, resp = post_stream(drill, body)
        sid = resp.headers["x-shardgate-stream-id"]
        head = read_events(resp, drop_after)
        conn.close()  # the client drops
        conn2, resp2 = reattach(drill, sid, last=head[-1][0])
        assert resp2.status == 200, (seed, resp2.status)
        tail = read_events(resp2)
        conn2.close()
        ids = [int(i.rpartition(":")[2]) for i, _ in head + tail]
        assert ids == list(range(1, len(ids) + 1)), seed  # every event once, in order
        assert (head + tail)[-1][1] == "[DONE]", seed
        return whole.choices[0].message.content or "", text_of(head + tail)

    store = drill.gateway.streams.store if drill.gateway is not None else None
    assert store is not None
    with api, ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(lambda p: one(*p), plans))
    assert len(results) == DRILL_STREAMS
    for seed, (whole, resumed) in enumerate(results):
        assert resumed == whole, seed
    assert store.nbytes <= 4194304
    until(lambda: running(drill) == 0, what="every request ended")


def test_a_stream_longer_than_a_replay_batch_is_replayed_whole(kept: Cluster) -> None:
    # More events than REPLAY_BATCH: replayed in batches, the same bytes in the same order.
    body = {
        "model": "sim-llama",
        "messages": MESSAGES,
        "stream": True,
        "max_tokens": REPLAY_BATCH + 100,
        "ignore_eos": True,
    }
    conn, resp = post_stream(kept, body)
    sid = resp.headers["x-shardgate-stream-id"]
    events = read_events(resp)
    conn.close()
    assert len(events) > REPLAY_BATCH + 100
    with httpx.Client(base_url=kept.http_url, timeout=30) as h:
        r = h.get(f"/v1/streams/{sid}", headers={"Authorization": "Bearer sk-alpha"})
    assert r.status_code == 200
    assert r.text.encode() == "".join(f"id: {i}\ndata: {d}\n\n" for i, d in events).encode()
