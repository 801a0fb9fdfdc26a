"""The openai backend when its engine server fails: a small OpenAI-compatible fake server
(tests/fake_engine_server.py) that stops answering, or dies mid-stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import openai
import pytest
import pytest_asyncio
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engine_sidecar.backend import ChatMessage, ErrorCode, Finish, RequestError, Sampling
from engine_sidecar.backends.openai import OpenAIConfig
from engine_sidecar.backends.openai.backend import OpenAIBackend
from engine_sidecar.backends.openai.body import OPENAI_CAPABILITIES
from engine_sidecar.backends.openai.client import ServerRefused
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from gateway.app import Gateway
from gateway.config.loader import parse
from tests.contract.harness import Collector
from tests.fake_engine_server import MODEL, FakeEngineServer
from tests.integration.poll import until_async
from tests.requests import engine_request

FAST: dict[str, Any] = {
    "health_interval_s": 0.05,
    "metrics_interval_s": 0.05,
    "rpc_timeout_s": 2.0,
    "health_timeout_s": 0.3,
    "unhealthy_after": 2,
    "startup_timeout_s": 10.0,
}


def config(server: FakeEngineServer, **kw: Any) -> OpenAIConfig:
    return OpenAIConfig(base_url=server.url, model=MODEL, **{**FAST, **kw})


@pytest_asyncio.fixture
async def fake() -> AsyncIterator[FakeEngineServer]:
    server = FakeEngineServer(token_delay_s=0.01)
    await server.start()
    yield server
    await server.stop()


@pytest_asyncio.fixture
async def backend(fake: FakeEngineServer) -> AsyncIterator[tuple[OpenAIBackend, Collector]]:
    b, c = OpenAIBackend(config(fake)), Collector()
    await b.start(c.sink)
    yield b, c
    await b.stop()


def submit(b: OpenAIBackend, key: int, max_tokens: int, **kw: Any) -> None:
    sampling = Sampling(max_tokens=max_tokens, temperature=0.0)
    if "messages" not in kw:
        kw.setdefault("prompt", "route the shards")
    b.submit(engine_request(key, model=MODEL, request_id="t", sampling=sampling, **kw))


async def health(port: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5.0)
        return int(reply.status)


async def test_a_server_that_stops_answering_turns_the_sidecar_not_serving(
    fake: FakeEngineServer,
) -> None:
    sidecar = Sidecar(SidecarConfig(port=0, backend="openai", openai=config(fake)))
    await sidecar.start()
    try:
        assert await health(sidecar.port) == health_pb2.HealthCheckResponse.SERVING
        fake.hang()
        await until_async(lambda: not sidecar.backend.healthy(), 10.0, "engine seen dead")
        assert not sidecar.backend.load().ready
        serving = [health_pb2.HealthCheckResponse.SERVING]

        async def poll() -> None:
            serving[0] = await health(sidecar.port)

        for _ in range(500):  # bounded: the sidecar's watch runs every 0.1 s
            await poll()
            if serving[0] == health_pb2.HealthCheckResponse.NOT_SERVING:
                break
        assert serving[0] == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        await sidecar.stop(0.1)


async def test_killed_mid_stream_fails_the_request_retriably(
    fake: FakeEngineServer, backend: tuple[OpenAIBackend, Collector]
) -> None:
    b, c = backend
    submit(b, 1, 400)
    await c.first(1)
    await fake.kill()
    deltas = await c.finished(1)
    last = deltas[-1]
    assert last.finish is Finish.ERROR
    assert last.error_code is ErrorCode.UNAVAILABLE, last.error_message
    await until_async(lambda: not b.healthy(), 10.0, "dead server seen")


async def test_abort_closes_the_stream_on_the_server(
    fake: FakeEngineServer, backend: tuple[OpenAIBackend, Collector]
) -> None:
    b, c = backend
    submit(b, 1, 400)
    await c.first(1)
    assert fake.running == 1
    b.abort(1)
    await until_async(lambda: fake.client_gone == 1 and fake.running == 0, 10.0, "stream closed")
    seen = len(c.by_key[1])
    submit(b, 2, 3)
    await c.finished(2)
    assert len(c.by_key[1]) == seen and b.healthy()


async def test_resumed_continues_exactly_without_a_tokenizer(
    backend: tuple[OpenAIBackend, Collector],
) -> None:
    """The server's /tokenize gives the prompt's ids; prompt + generated ids go on exactly."""
    b, c = backend
    chat = {"messages": (ChatMessage("user", "go on"),)}
    submit(b, 1, 12, **chat)
    full = await c.finished(1)
    ids = [t for d in full for t in d.token_ids]
    assert len(ids) == 12
    submit(b, 2, 12, resume_token_ids=tuple(ids[:5]), **chat)
    resumed = await c.finished(2)
    assert [t for d in resumed for t in d.token_ids] == ids[5:]
    assert "".join(d.text for d in resumed) == "".join(d.text for d in full[5:])
    assert resumed[0].prompt_tokens == full[0].prompt_tokens
    assert (resumed[-1].finish, resumed[-1].completion_tokens) == (Finish.LENGTH, 12)


async def test_bad_requests_are_refused_at_submit_without_a_tokenizer(
    backend: tuple[OpenAIBackend, Collector],
) -> None:
    b, _ = backend
    cases = [
        ({"messages": ()}, "messages"),
        ({"prompt": ""}, "prompt"),
        ({"resume_token_ids": (1, 2, 3), "max_tokens": 2}, "resume_token_ids"),
    ]
    for kw, field in cases:
        with pytest.raises(RequestError) as e:
            submit(b, 7, kw.pop("max_tokens", 4), **kw)  # type: ignore[arg-type]
        assert (e.value.code, e.value.field) == (ErrorCode.INVALID_ARGUMENT, field)


async def test_a_text_only_server_is_used_for_text(fake: FakeEngineServer) -> None:
    fake.token_ids = False
    b, c = OpenAIBackend(config(fake)), Collector()
    await b.start(c.sink)
    try:
        assert b.info().capabilities == OPENAI_CAPABILITIES
        assert b.info().extra["token_ids"] == "no"
        submit(b, 1, 5)
        deltas = await c.finished(1)
        assert "".join(d.text for d in deltas).count(" w") == 5
        assert all(not d.token_ids for d in deltas)
        assert (deltas[-1].finish, deltas[-1].completion_tokens) == (Finish.LENGTH, 5)
        assert deltas[-1].prompt_tokens == 3
    finally:
        await b.stop()


async def test_the_api_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    server = FakeEngineServer(api_key="sesame")
    await server.start()
    try:
        b = OpenAIBackend(config(server, api_key_env="ENGINE_KEY"))
        with pytest.raises(ServerRefused) as e:  # (not set)
            await b.start(Collector().sink)
        assert e.value.status == 401
        monkeypatch.setenv("ENGINE_KEY", "sesame")
        b, c = OpenAIBackend(config(server, api_key_env="ENGINE_KEY")), Collector()
        await b.start(c.sink)
        try:
            submit(b, 1, 3)
            assert (await c.finished(1))[-1].finish is Finish.LENGTH
        finally:
            await b.stop()
    finally:
        await server.stop()


class ColdServer(FakeEngineServer):
    """An engine whose completions take far longer than an RPC (a cold or busy engine)."""

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(1.0)  # (twice the RPC deadline below)
        return await super()._completions(request)


async def test_the_start_probes_wait_for_a_slow_engine_as_completions_do() -> None:
    """The probes at start are completions: held to a first chunk's deadline, not an RPC's."""
    server = ColdServer()
    await server.start()
    try:
        b = OpenAIBackend(config(server, rpc_timeout_s=0.5, first_chunk_timeout_s=30.0))
        await b.start(Collector().sink)
        try:
            assert b.info().extra["token_ids"] == "yes"
            assert any(body.get("return_token_ids") for body in server.bodies)
        finally:
            await b.stop()
    finally:
        await server.stop()


GATEWAY_YAML = """
gateway: {default_max_tokens: 64}
sidecars:
  - {name: openai-0, address: '127.0.0.1:%d'}
  - {name: openai-1, address: '127.0.0.1:%d'}
"""


@asynccontextmanager
async def two_replicas(
    fakes: list[FakeEngineServer],
) -> AsyncIterator[tuple[Gateway, list[Sidecar]]]:
    """A gateway in front of two openai-backend sidecars, one per fake engine server."""
    sidecars: list[Sidecar] = []
    gateway: Gateway | None = None
    try:
        for i, f in enumerate(fakes):
            await f.start()
            cfg = SidecarConfig(name=f"openai-{i}", port=0, backend="openai", openai=config(f))
            sidecars.append(Sidecar(cfg))
            await sidecars[-1].start()
        yaml = GATEWAY_YAML % (sidecars[0].port, sidecars[1].port)
        gateway = Gateway(parse(yaml), http_port=0, grpc_port=0)
        await gateway.start()
        yield gateway, sidecars
    finally:
        if gateway is not None:
            await gateway.stop(1.0)
        for s in sidecars:
            await s.stop(0.1)
        for f in fakes:
            await f.stop()


async def test_a_stream_migrates_with_identical_text_when_its_server_dies() -> None:
    fakes = [FakeEngineServer(token_delay_s=0.005) for _ in range(2)]
    async with two_replicas(fakes) as (gateway, sidecars):
        assert await gateway.fleet.wait_connected(10.0)
        base = f"http://127.0.0.1:{gateway.http_port}/v1"
        async with openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0) as client:
            request: dict[str, Any] = {
                "model": MODEL,
                "messages": [{"role": "user", "content": "migrate me"}],
                "max_tokens": 120,
                "temperature": 0.0,
            }
            whole = await client.chat.completions.create(**request)
            reference = whole.choices[0].message.content
            assert reference and reference.count(" w") == 120
            raw = await client.chat.completions.with_raw_response.create(**request, stream=True)
            replica = raw.headers["x-shardgate-replica"]
            [victim] = [
                f for f, s in zip(fakes, sidecars, strict=True) if replica.endswith(str(s.port))
            ]
            pieces, finish = [], None
            async for i, chunk in _enumerate(raw.parse()):
                if i == 10:
                    await victim.kill()
                for choice in chunk.choices:
                    pieces.append(choice.delta.content or "")
                    finish = choice.finish_reason or finish
        assert "".join(pieces) == reference
        assert finish == "length"
        # The survivor continued it: prompt + the tokens so far, as token ids.
        [survivor] = [f for f in fakes if f is not victim]
        resumed = survivor.bodies[-1]
        assert isinstance(resumed["prompt"], list) and resumed["max_tokens"] < 120


async def test_a_dead_server_takes_its_replica_out_of_the_models_readiness() -> None:
    """With no stream to break, only the sidecar's health checks see the server die: its load
    reports turn not ready, and the gateway stops counting the replica at once (and counts it
    again once a server answers there)."""
    fakes = [FakeEngineServer() for _ in range(2)]
    async with two_replicas(fakes) as (gateway, _):
        fleet = gateway.fleet
        assert await fleet.wait_connected(10.0)

        def routable() -> int:
            return fleet.models().get(MODEL, (0, 0))[1]

        await until_async(lambda: routable() == 2, 10.0, "both replicas routable")
        await fakes[0].kill()
        await until_async(lambda: routable() == 1, 10.0, "the dead server's replica out")
        fakes[0] = FakeEngineServer(port=fakes[0].port)
        await fakes[0].start()
        await until_async(lambda: routable() == 2, 10.0, "the replica back")


async def _enumerate(stream: Any) -> AsyncIterator[tuple[int, Any]]:
    i = 0
    async for item in stream:
        yield i, item
        i += 1
