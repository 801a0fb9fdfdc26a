"""Failover: a sidecar that dies mid-stream is replaced without the client seeing it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.server import Sidecar
from tests.integration.cluster import Cluster, cut

REQUEST: dict[str, Any] = {
    "model": "sim-llama",
    "messages": [{"role": "user", "content": "Migrate me, please."}],
    "max_tokens": 300,
    "extra_body": {"ignore_eos": True},
}


@pytest.fixture(params=["auto", "grpc"])
def failover_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Over the TCP link (auto) and over the gRPC Link stream."""
    sim = SimConfig(model="sim-llama", profile="fast")
    gateway = f"gateway: {{default_max_tokens: 64, link: {{transport: {request.param}}}}}"
    c = Cluster(gateway, [{"sim": sim}, {"sim": sim}, {"sim": sim}])
    c.start()
    yield c
    c.stop()


def kill_sidecar(cluster: Cluster, address: str) -> None:
    [sidecar] = [s for s in cluster.sidecars if f"127.0.0.1:{s.port}" == address]

    async def crash() -> None:
        await cut(sidecar)

    cluster.run(crash())


def test_stream_migrates_with_identical_text(failover_cluster: Cluster) -> None:
    c = failover_cluster
    client = openai.OpenAI(base_url=f"{c.http_url}/v1", api_key="none", max_retries=0)
    reference = client.chat.completions.create(**REQUEST).choices[0].message.content
    assert reference

    raw = client.chat.completions.with_raw_response.create(**REQUEST, stream=True)
    replica = raw.headers["x-shardgate-replica"]
    pieces: list[str] = []
    finish = None
    for i, chunk in enumerate(raw.parse()):
        if i == 20:
            kill_sidecar(c, replica)
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert finish == "length"
    assert len(pieces) == 300
    assert "".join(pieces) == reference
    assert c.gateway is not None and c.gateway.supervisor.migrations >= 1


def test_no_replica_left_ends_the_stream_with_an_error(failover_cluster: Cluster) -> None:
    c = failover_cluster
    client = openai.OpenAI(base_url=f"{c.http_url}/v1", api_key="none", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(**REQUEST, stream=True)
    stream = raw.parse()
    got = 0
    with pytest.raises(openai.APIError) as e:
        for i, chunk in enumerate(stream):
            if i == 5:
                for address in c.sidecar_targets():
                    kill_sidecar(c, address)
            if chunk.choices and chunk.choices[0].delta.content:
                got += 1
    assert got < 300
    assert "sidecar" in str(e.value.message) or "replica" in str(e.value.message)


def test_a_stream_can_migrate_back_to_a_replica_that_recovered() -> None:
    sim = SimConfig(model="sim-llama", profile="fast")
    c = Cluster("gateway: {default_max_tokens: 64}", [{"sim": sim}, {"sim": sim}])
    c.start()
    try:
        client = openai.OpenAI(base_url=f"{c.http_url}/v1", api_key="none", max_retries=0)
        request = {**REQUEST, "max_tokens": 1200}
        reference = client.chat.completions.create(**request).choices[0].message.content
        raw = client.chat.completions.with_raw_response.create(**request, stream=True)
        first = raw.headers["x-shardgate-replica"]
        [i] = [k for k, s in enumerate(c.sidecars) if f"127.0.0.1:{s.port}" == first]
        other = 1 - i
        pieces: list[str] = []
        for n, chunk in enumerate(raw.parse()):
            if n == 20:
                kill_sidecar(c, first)  # -> migrates to the other one
                restart(c, i)  # the first one comes back
            if n == 200:
                kill_sidecar(c, f"127.0.0.1:{c.sidecars[other].port}")  # -> back to the first
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
        assert "".join(pieces) == reference
        assert c.gateway is not None and c.gateway.supervisor.migrations >= 2
        client.close()
    finally:
        c.stop()


def restart(c: Cluster, i: int) -> None:
    old = c.sidecars[i]

    async def again() -> None:
        fields = {f: getattr(old.config, f) for f in old.config.__struct_fields__}
        new = Sidecar(old.config.__class__(**{**fields, "port": old.port}))
        await new.start()
        c.sidecars[i] = new

    c.run(again())
    assert c.gateway is not None
    fleet = c.gateway.fleet
    name = old.config.name
    deadline = time.monotonic() + 20
    while not any(r.routable and r.name == name for r in fleet.pool("sim-llama")):
        assert time.monotonic() < deadline, "the restarted sidecar did not come back"
        time.sleep(0.02)
