"""`shardgate up --workers 2`: a stream or a response is kept by the worker that served it, and
a reattach, retrieve, cancel or gRPC Resume reaches it through whichever worker the client's
connection lands on (the kernel picks: each check connects until both the owner and the other
worker answered, as `x-shardgate-worker` says). Another tenant still gets 404."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import grpc
import openai
import pytest
from shardgate.v1 import engine_pb2, engine_pb2_grpc
from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import gateway_pb2_grpc as pb_grpc

from gateway.streams.ask import ROUTES
from gateway.streams.owner import RESPONSE, STREAM, owner_of
from tests.integration.poll import until
from tests.integration.test_stream_resume import read_events, text_of
from tests.integration.test_up import shardgate_up
from tests.integration.test_workers import all_serving
from tests.ports import free_port

WORKER = "x-shardgate-worker"
SIM = "{backend: sim, sim: {model: sim-llama, profile: paced-10ms, max_model_len: 8192}}"
MESSAGES = [{"role": "user", "content": "tell me a long story"}]
# A channel's connection of its own (not one shared by every channel to the same target).
OWN_CONNECTION = (("grpc.use_local_subchannel_pool", 1),)
GRACE_S = 5
ATTEMPTS = 64  # connections until both workers answered (each lands on either, at random)


class Up(NamedTuple):
    host: str
    port: int
    grpc_target: str
    sidecar: str

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    http, grpc_port, sidecar = free_port(), free_port(), free_port()
    config: Path = tmp_path_factory.mktemp("workers") / "gw.yaml"
    config.write_text(
        f"gateway: {{http: {{port: {http}}}, grpc: {{port: {grpc_port}}}, watch_config: false, "
        f"default_max_tokens: 64, detach_grace_s: {GRACE_S}, resumable_streams: {list(ROUTES)}}}\n"
        f"sidecars:\n  - {{name: a, address: '127.0.0.1:{sidecar}', launch: {SIM}}}\n"
        "tenants:\n  - {name: alpha, keys: [sk-alpha]}\n  - {name: beta, keys: [sk-beta]}\n"
    )
    with shardgate_up("--config", str(config), "--workers", "2", "--log-level", "ERROR") as proc:
        assert proc.stdout is not None
        assert b"shardgate is up" in proc.stdout.readline()
        u = Up("127.0.0.1", http, f"127.0.0.1:{grpc_port}", f"127.0.0.1:{sidecar}")
        until(lambda: all_serving(u.url), 20.0)
        yield u


def chat(max_tokens: int) -> dict[str, Any]:
    return {
        "model": "sim-llama",
        "messages": MESSAGES,
        "stream": True,
        "max_tokens": max_tokens,
        "seed": 7,
        "ignore_eos": True,
    }


def request(
    up: Up, method: str, path: str, key: str = "sk-alpha", body: Any = None, **headers: str
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """On a new connection (so the kernel picks a worker for each)."""
    conn = http.client.HTTPConnection(up.host, up.port, timeout=30)
    hdrs = {"Authorization": f"Bearer {key}", **headers}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        hdrs["Content-Type"] = "application/json"
    conn.request(method, path, data, hdrs)
    return conn, conn.getresponse()


def worker_of(resp: http.client.HTTPResponse) -> int:  # (the one the connection reached)
    value = resp.getheader(WORKER)
    assert value is not None, "no worker header"
    return int(value)


def until_both(attempt: Callable[[], bool]) -> None:
    """Call `attempt` (True: it reached the owner) until the owner and the other worker were
    both reached."""
    seen: set[bool] = set()
    for _ in range(ATTEMPTS):
        seen.add(attempt())
        if len(seen) == 2:
            return
    raise AssertionError(f"only {'the owner' if True in seen else 'the other'} was reached")


def test_a_dropped_stream_reattaches_through_either_worker_with_no_gap(up: Up) -> None:
    conn, resp = request(up, "POST", "/v1/chat/completions", body=chat(600))
    whole_conn, whole_resp = request(up, "POST", "/v1/chat/completions", body=chat(600))
    sid = resp.headers["x-shardgate-stream-id"]
    owner = owner_of(sid, STREAM)
    assert owner in (0, 1)
    assert worker_of(resp) == owner  # (the streaming routes name their worker too)
    events = read_events(resp, 10)
    conn.close()  # the client drops mid-way

    def reattach() -> bool:
        c, r = request(up, "GET", f"/v1/streams/{sid}", **{"Last-Event-ID": events[-1][0]})
        assert r.status == 200
        assert r.getheader("x-shardgate-stream-id") == sid
        events.extend(read_events(r, 5))  # (live: ~5 tokens in 50 ms)
        c.close()  # dropped again
        return worker_of(r) == owner

    until_both(reattach)
    assert events[-1][1] != "[DONE]"  # both were reached while it was still live
    c, r = request(up, "GET", f"/v1/streams/{sid}", **{"Last-Event-ID": events[-1][0]})
    events.extend(read_events(r))
    c.close()
    whole = read_events(whole_resp)  # an undisturbed run of the same request
    whole_conn.close()
    ids = [int(i.rpartition(":")[2]) for i, _ in events]
    assert ids == list(range(1, len(ids) + 1))  # every event once, in order
    assert events[-1][1] == "[DONE]"
    assert text_of(events) == text_of(whole)
    assert len(text_of(whole)) > 500


def test_another_tenants_reattach_is_404_through_either_worker(up: Up) -> None:
    conn, resp = request(up, "POST", "/v1/chat/completions", body=chat(40))
    sid = resp.headers["x-shardgate-stream-id"]
    owner = owner_of(sid, STREAM)
    assert owner in (0, 1)
    read_events(resp)
    conn.close()

    def attempt(key: str, status: int) -> Callable[[], bool]:
        def one() -> bool:
            c, r = request(up, "GET", f"/v1/streams/{sid}", key, **{"Last-Event-ID": f"{sid}:3"})
            body = r.read()
            c.close()
            assert r.status == status, body
            if status == 404:
                assert json.loads(body)["error"]["type"] == "not_found_error"
            return worker_of(r) == owner

        return one

    until_both(attempt("sk-alpha", 200))
    until_both(attempt("sk-beta", 404))


def running(up: Up) -> int:
    """Requests in the engine, as its sidecar reports them."""
    with grpc.insecure_channel(up.sidecar) as ch:
        reply = engine_pb2_grpc.EngineStub(ch).Info(engine_pb2.InfoRequest(), timeout=5)
        return int(reply.load.running + reply.load.waiting)


def test_a_client_that_leaves_a_forwarded_stream_leaves_it_at_the_owner(up: Up) -> None:
    until(lambda: running(up) == 0, 30.0, "an idle engine")
    conn, resp = request(up, "POST", "/v1/chat/completions", body=chat(3000))
    sid = resp.headers["x-shardgate-stream-id"]
    owner = owner_of(sid, STREAM)
    events = read_events(resp, 3)
    conn.close()
    for _ in range(ATTEMPTS):  # reattached until through the other worker, then dropped
        c, r = request(up, "GET", f"/v1/streams/{sid}", **{"Last-Event-ID": events[-1][0]})
        assert r.status == 200
        events.extend(read_events(r, 3))
        c.close()
        if worker_of(r) != owner:
            break
    else:
        raise AssertionError("the other worker was never reached")
    assert running(up) == 1  # it runs on, detached, for the grace ...
    # ... and nobody reads it at the owner any more: its grace passes, and it is aborted
    # (30 s before its own end).
    until(lambda: running(up) == 0, GRACE_S + 10.0, "the abandoned request aborted")


def sdk(up: Up) -> openai.OpenAI:
    """A client of its own: its requests on connections of their own."""
    return openai.OpenAI(base_url=f"{up.url}/v1", api_key="sk-alpha", max_retries=0)


def test_a_background_response_is_retrieved_and_cancelled_through_either_worker(up: Up) -> None:
    with sdk(up) as api:
        r = api.responses.create(
            model="sim-llama",
            input="Tell me.",
            max_output_tokens=400,
            background=True,
            extra_body={"ignore_eos": True},
        )
    owner = owner_of(r.id, RESPONSE)
    assert owner in (0, 1)
    got: list[Any] = []

    def retrieve() -> bool:
        after = got[-1].sequence_number if got else -1
        with sdk(up) as api:
            raw = api.responses.with_raw_response.retrieve(r.id, stream=True, starting_after=after)
            with raw.parse() as stream:
                for event in stream:
                    got.append(event)
                    if event.sequence_number >= after + 5:
                        break
        return int(raw.headers[WORKER]) == owner

    until_both(retrieve)
    assert got[-1].type != "response.completed"  # both were reached while it still ran
    with sdk(up) as api:
        after = got[-1].sequence_number
        got.extend(api.responses.retrieve(r.id, stream=True, starting_after=after))
        done = api.responses.retrieve(r.id)
    assert [e.sequence_number for e in got] == list(range(len(got)))
    assert got[-1].type == "response.completed"
    text = "".join(e.delta for e in got if e.type == "response.output_text.delta")
    assert text == done.output_text
    assert len(text) > 300

    def cancel() -> bool:  # a running one, cancelled through either worker
        with sdk(up) as api:
            run = api.responses.create(
                model="sim-llama",
                input="Tell me.",
                max_output_tokens=3000,
                background=True,
                extra_body={"ignore_eos": True},
            )
        with sdk(up) as api:
            raw = api.responses.with_raw_response.cancel(run.id)
            assert raw.parse().status == "cancelled"
        with sdk(up) as api:
            assert api.responses.retrieve(run.id).status == "cancelled"
        return int(raw.headers[WORKER]) == owner_of(run.id, RESPONSE)

    until_both(cancel)


def test_grpc_resume_through_either_worker_continues_after_the_last_seq(up: Up) -> None:
    req = pb.GenerateRequest(
        model="sim-llama", prompt="a long story", max_tokens=400, seed=3, ignore_eos=True
    )
    md = (("authorization", "Bearer sk-alpha"),)
    with grpc.insecure_channel(up.grpc_target) as ch:
        stub = pb_grpc.GatewayStub(ch)
        whole_call = stub.Generate(req, timeout=60, metadata=md)  # an undisturbed run
        call = stub.Generate(req, timeout=60, metadata=md)
        got = [next(call) for _ in range(10)]
        call.cancel()  # the client drops mid-way
        sid = got[0].stream_id
        owner = owner_of(sid, STREAM)
        assert owner in (0, 1)

        def resume(key: str, count: int) -> tuple[bool, grpc.StatusCode | None]:
            """Read `count` responses (on a channel, so a connection, of its own)."""
            with grpc.insecure_channel(up.grpc_target, OWN_CONNECTION) as own:
                r = pb_grpc.GatewayStub(own).Resume(
                    pb.ResumeRequest(stream_id=sid, after_seq=got[-1].seq),
                    timeout=60,
                    metadata=(("authorization", f"Bearer {key}"),),
                )
                reached = int(dict(r.initial_metadata())[WORKER]) == owner
                try:
                    for _, out in zip(range(count), r, strict=False):
                        got.append(out)
                except grpc.RpcError as e:
                    return reached, e.code()
                r.cancel()
            return reached, None

        def other_tenant() -> bool:
            reached, code = resume("sk-beta", 1)
            assert code == grpc.StatusCode.NOT_FOUND
            return reached

        def reattach() -> bool:
            reached, code = resume("sk-alpha", 5)
            assert code is None
            return reached

        until_both(other_tenant)
        until_both(reattach)
        assert not got[-1].finish_reason  # both were reached while it was still live
        resume("sk-alpha", 10_000)
        whole = list(whole_call)
    assert [r.seq for r in got] == list(range(1, len(got) + 1))
    assert got[-1].finish_reason == "length"
    assert [t for r in got for t in r.token_ids] == [t for r in whole for t in r.token_ids]
