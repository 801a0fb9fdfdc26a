"""Shard-aware routing and heartbeat failover against real sidecars on loopback."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import openai
import pytest
from shardgate.v1 import engine_pb2 as epb
from shardgate.v1 import engine_pb2_grpc as epb_grpc

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster, cut

SIM = SimConfig(model="sim-llama", profile="fast")
REQUEST: dict[str, Any] = {
    "model": "sim-llama",
    "messages": [{"role": "user", "content": "Shards, please."}],
    "max_tokens": 300,
    "extra_body": {"ignore_eos": True},
}
GATEWAY = "gateway: {default_max_tokens: 16}\nhealth: {heartbeat_interval_s: 0.2}"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    # sim-0 and sim-1 are one replica (group tp, ranks 0 and 1); sim-2 stands alone.
    c = Cluster(
        GATEWAY,
        [
            {"sim": SIM, "group": "tp", "rank": 0, "world_size": 2, "heartbeat_interval_s": 0.2},
            {"sim": SIM, "group": "tp", "rank": 1, "world_size": 2, "heartbeat_interval_s": 0.2},
            {"sim": SIM, "heartbeat_interval_s": 0.2, "allow_fault_injection": True},
        ],
    )
    c.start()
    yield c
    c.stop()


def address(c: Cluster, i: int) -> str:
    return f"127.0.0.1:{c.sidecars[i].port}"


def client(c: Cluster) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{c.http_url}/v1", api_key="none", max_retries=0)


def replicas_used(c: Cluster, n: int) -> set[str]:
    with client(c) as api:
        return {
            api.chat.completions.with_raw_response.create(**{**REQUEST, "max_tokens": 2}).headers[
                "x-shardgate-replica"
            ]
            for _ in range(n)
        }


def eventually(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def stop_sidecar(c: Cluster, i: int) -> None:
    async def crash() -> None:
        await cut(c.sidecars[i])

    c.run(crash())


def test_a_shard_group_is_one_replica_and_only_rank_0_takes_requests(cluster: Cluster) -> None:
    assert cluster.gateway is not None
    pool = cluster.gateway.fleet.pool("sim-llama")
    assert sorted((r.name, r.address, r.whole) for r in pool) == sorted(
        [("tp", address(cluster, 0), True), ("sim-2", address(cluster, 2), True)]
    )
    used = replicas_used(cluster, 30)
    assert used == {address(cluster, 0), address(cluster, 2)}


def test_losing_a_non_zero_rank_migrates_the_group_s_streams(cluster: Cluster) -> None:
    with client(cluster) as api:
        reference = api.chat.completions.create(**REQUEST).choices[0].message.content
        pieces: list[str] = []
        migrated = False
        while not migrated:  # until a stream lands on the group
            raw = api.chat.completions.with_raw_response.create(**REQUEST, stream=True)
            on_group = raw.headers["x-shardgate-replica"] == address(cluster, 0)
            pieces = []
            for i, chunk in enumerate(raw.parse()):
                if i == 20 and on_group:
                    stop_sidecar(cluster, 1)  # rank 1 dies: the group is no longer whole
                    migrated = True
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
    assert "".join(pieces) == reference
    assert len(pieces) == 300
    assert cluster.gateway is not None and cluster.gateway.supervisor.migrations >= 1
    # The group stays out while it is not whole: everything goes to sim-2.
    assert replicas_used(cluster, 10) == {address(cluster, 2)}


def test_missed_heartbeats_take_a_sidecar_out_and_back(cluster: Cluster) -> None:
    with grpc.insecure_channel(address(cluster, 2)) as ch:
        faults = epb_grpc.EngineStub(ch)
        faults.SetFaults(epb.Faults(stop_heartbeats=True), timeout=5)
        assert cluster.gateway is not None
        fleet = cluster.gateway.fleet
        eventually(
            lambda: not any(r.routable for r in fleet.pool("sim-llama") if r.name == "sim-2")
        )
        assert replicas_used(cluster, 10) == {address(cluster, 0)}
        faults.SetFaults(epb.Faults(), timeout=5)
        eventually(lambda: all(r.routable for r in fleet.pool("sim-llama")))
    assert replicas_used(cluster, 30) == {address(cluster, 0), address(cluster, 2)}


def test_an_engine_refusal_before_the_first_token_is_retried_elsewhere(cluster: Cluster) -> None:
    assert cluster.gateway is not None
    cluster.sidecars[2].hub.draining = True  # sim-2 refuses new work with UNAVAILABLE
    before = cluster.gateway.supervisor.retries
    with client(cluster) as api:
        for _ in range(10):
            r = api.chat.completions.create(**{**REQUEST, "max_tokens": 4})
            assert r.choices[0].message.content
    assert cluster.gateway.supervisor.retries > before
    cluster.sidecars[2].hub.draining = False


def test_the_link_reconnects_to_a_restarted_sidecar(cluster: Cluster) -> None:
    assert cluster.gateway is not None
    port = cluster.sidecars[2].port
    stop_sidecar(cluster, 2)
    fleet = cluster.gateway.fleet
    eventually(lambda: not fleet.by_name["sim-2"].connected)

    async def restart() -> None:
        from engine_sidecar.server import Sidecar

        old = cluster.sidecars[2]
        new = Sidecar(old.config.__class__(**{**_fields(old.config), "port": port}))
        await new.start()
        cluster.sidecars[2] = new

    cluster.run(restart())
    eventually(lambda: fleet.by_name["sim-2"].connected, 15)
    eventually(lambda: all(r.routable for r in fleet.pool("sim-llama")))
    assert address(cluster, 2) in replicas_used(cluster, 30)


def _fields(cfg: Any) -> dict[str, Any]:
    return {f: getattr(cfg, f) for f in cfg.__struct_fields__}
