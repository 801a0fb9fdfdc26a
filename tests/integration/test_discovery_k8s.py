"""Kubernetes discovery against a small API server that speaks list/watch and misbehaves, with
real sim sidecars behind the EndpointSlices (one slice per sidecar: each has its own port)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.config import SidecarConfig
from engine_sidecar.server import Sidecar
from gateway.app import Gateway
from gateway.config.loader import parse
from gateway.discovery.runner import Discovery, ErrorKind
from tests.integration.k8s_api import FakeKubeApi, endpoint
from tests.integration.poll import until_async

SIM = SimConfig(model="sim-llama", profile="fast")
NS, SERVICE, TOKEN = "shard", "shardgate-sidecar", "t0k3n"


class World:
    def __init__(self, api: FakeKubeApi, sidecars: list[Sidecar], gateway: Gateway) -> None:
        self.api = api
        self.sidecars = sidecars
        self.gateway = gateway

    @property
    def discovery(self) -> Discovery:
        assert self.gateway.discovery is not None
        return self.gateway.discovery

    def routed(self) -> set[str]:
        """The sidecars the fleet connects and routes to (the drained ones are not in it)."""
        return set(self.gateway.fleet.by_name)

    def connected(self) -> set[str]:
        """The sidecars whose replicas are routable: connected and found healthy by the fleet."""
        return {r.head for r in self.gateway.fleet.assembly.pool("sim-llama") if r.routable}

    async def put(self, i: int, **conditions: bool) -> None:
        """Slice `s{i}` lists sidecar i as pod-{i} (one slice per sidecar: each has its port)."""
        await self.api.put(
            f"s{i}", self.sidecars[i].port, endpoint("127.0.0.1", f"pod-{i}", **conditions)
        )

    async def chat(self, max_tokens: int = 8) -> dict[str, Any]:
        body = {
            "model": "sim-llama",
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
        url = f"http://127.0.0.1:{self.gateway.http_port}/v1/chat/completions"
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as s, s.post(url, json=body) as r:
            assert r.status == 200, await r.text()
            out: dict[str, Any] = await r.json()
            return out

    def metric(self, name: str, **labels: str) -> float | None:
        text = self.gateway.metrics.render()[0].decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return float(sample.value)
        return None


Factory = Callable[..., Awaitable[World]]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[Factory]:
    """Starts an API server, three sim sidecars (none listed yet) and a gateway discovering them
    with the given `kubernetes:` settings (short deadlines; no periodic re-list unless asked)."""
    made: list[World] = []

    token = tmp_path / "token"

    async def make(**settings: object) -> World:
        api = FakeKubeApi(NS, SERVICE, token=TOKEN)
        await api.start()
        token.write_text(TOKEN + "\n")
        sidecars = []
        for i in range(3):
            s = Sidecar(SidecarConfig(name=f"sim-{i}", port=0, heartbeat_interval_s=0.1, sim=SIM))
            await s.start()
            sidecars.append(s)
        k8s: dict[str, object] = {
            "service": SERVICE,
            "namespace": NS,
            "api_url": api.url,
            "token_file": str(token),
            "resync_s": 300,
            "watch_timeout_s": 1,
            "request_timeout_s": 1,
            "retry_min_s": 0.05,
            "retry_max_s": 0.2,
            **settings,
        }
        discovery = {"mode": "kubernetes", "kubernetes": k8s}
        yaml = "gateway: {default_max_tokens: 8, drain_timeout_s: 20}\n"
        yaml += f"discovery: {json.dumps(discovery)}\n"  # JSON is YAML
        gateway = Gateway(parse(yaml), http_port=0, grpc_port=0)
        await gateway.start()
        w = World(api, sidecars, gateway)
        made.append(w)
        return w

    yield make
    for w in made:
        await w.gateway.stop(1.0)
        for s in w.sidecars:
            await s.stop(0.2)
        await w.api.stop()


async def test_listed_then_watched_sidecars_are_connected_and_serve(world: Factory) -> None:
    w = await world()
    await w.put(0)
    await until_async(lambda: w.connected() == {"pod-0"}, what="pod-0 discovered and connected")
    assert (await w.chat())["usage"]["completion_tokens"] == 8
    await w.put(1)  # after the list: only the watch can tell
    await w.api.put("s2", w.sidecars[2].port, endpoint("127.0.0.1", "pod-2", ready=False))
    await until_async(lambda: w.connected() == {"pod-0", "pod-1"}, what="pod-1 by the watch")
    assert w.api.lists == 1 and w.api.unauthorized == 0
    assert w.api.watched_from[0] == w.api.listed_at[0]  # watched from the list's version
    assert w.metric("shardgate_discovery_sidecars", state="routable") == 2
    assert w.metric("shardgate_discovery_sidecars", state="draining") == 0  # pod-2 never ready
    assert w.metric("shardgate_discovery_stale") == 0
    # Real links to the two ready sidecars; none to the one never ready.
    assert [s.tcp_link.open for s in w.sidecars] == [1, 1, 0]


async def test_a_terminating_endpoint_drains_its_stream_then_is_removed(world: Factory) -> None:
    w = await world()
    await w.put(0)
    await until_async(lambda: w.connected() == {"pod-0"}, what="pod-0 connected")
    long = asyncio.create_task(w.chat(max_tokens=1500))  # ~3 s on the fast profile
    link = w.gateway.fleet.by_name["pod-0"]
    await until_async(lambda: link.inflight == 1, what="the long stream on pod-0")
    await w.put(1)
    await w.put(0, ready=False, serving=True, terminating=True)
    await until_async(
        lambda: w.routed() == w.connected() == {"pod-1"}, what="pod-0 no longer routed, pod-1 up"
    )
    assert link in w.gateway.fleet.draining and link.inflight == 1  # still finishing its stream
    assert w.metric("shardgate_discovery_sidecars", state="draining") == 1
    await w.chat()  # new requests go to pod-1
    out = await long
    assert out["usage"]["completion_tokens"] == 1500
    assert out["choices"][0]["finish_reason"] == "length"
    await w.api.delete("s0")
    await until_async(lambda: "pod-0" not in w.discovery.members, what="pod-0 removed")
    await until_async(lambda: link not in w.gateway.fleet.draining, what="pod-0's link closed")
    assert w.metric("shardgate_discovery_sidecars", state="draining") == 0


@pytest.mark.parametrize("as_http", [False, True], ids=["error-event", "http-410"])
async def test_410_gone_lists_again(world: Factory, as_http: bool) -> None:
    w = await world()
    await w.put(0)
    await until_async(lambda: w.connected() == {"pod-0"}, what="pod-0 connected")
    w.api.gone_as_http = as_http
    # The open watch gets an ERROR event with code 410, or (HTTP) ends in order and the next
    # one, from the version the gateway holds, is refused with 410.
    await w.api.expire(notify_open=not as_http)
    await until_async(lambda: w.discovery.errors[ErrorKind.EXPIRED] >= 1, what="a 410")
    await w.put(1)  # at a version after the compaction: seen only by a watch after a re-list
    await until_async(lambda: w.connected() == {"pod-0", "pod-1"}, what="pod-1 after a re-list")
    assert w.api.lists >= 2


async def test_a_silent_watch_is_noticed_and_the_slices_listed_again(world: Factory) -> None:
    w = await world()
    w.api.silent = True  # the list answers; every watch accepts and then says nothing, ever
    await w.put(0)
    await until_async(lambda: w.connected() == {"pod-0"}, what="pod-0 from the list")
    await w.put(1)
    await until_async(lambda: "pod-1" in w.routed(), what="pod-1 from a list after the silence")
    assert w.discovery.errors[ErrorKind.SILENT] >= 1


async def test_watches_that_end_at_once_count_as_failures_not_a_loop(world: Factory) -> None:
    w = await world()
    w.api.cut = True
    await w.put(0)
    await until_async(lambda: w.connected() == {"pod-0"}, what="pod-0 from the list")
    errors = w.discovery.errors
    await until_async(lambda: errors[ErrorKind.WATCH] >= 3, what="cut watches counted")
    assert w.discovery.stale and w.connected() == {"pod-0"}
    assert w.api.watches <= errors[ErrorKind.WATCH] + 1  # each one failed, then a backoff


async def test_a_dropped_delete_is_repaired_by_the_periodic_list(world: Factory) -> None:
    w = await world(resync_s=1.5)
    await w.put(0)
    await w.put(1)
    await until_async(lambda: w.connected() == {"pod-0", "pod-1"}, what="both connected")
    w.api.drop_deletes = True
    await w.api.delete("s1")  # gone from the list; no DELETED event ever comes
    await until_async(lambda: w.routed() == {"pod-0"}, what="pod-1 gone after a re-list")
    assert w.discovery.errors == dict.fromkeys(ErrorKind, 0)  # nothing failed: the list repaired it


async def test_api_server_down_keeps_the_set_marked_stale(world: Factory) -> None:
    w = await world()
    await w.put(0)
    await w.put(1)
    await until_async(lambda: w.connected() == {"pod-0", "pod-1"}, what="both connected")
    await w.api.stop()
    await until_async(lambda: w.metric("shardgate_discovery_stale") == 1, what="marked stale")
    errors = w.discovery.errors
    await until_async(lambda: errors[ErrorKind.LIST] >= 2, what="lists refused while it is down")
    assert w.connected() == {"pod-0", "pod-1"}  # the last known set stays, and serves
    assert (await w.chat())["usage"]["completion_tokens"] == 8
    failures = w.metric("shardgate_discovery_errors_total", kind="list")
    assert failures is not None and failures >= 2
    await w.api.start()  # back, on the same port
    await until_async(lambda: w.metric("shardgate_discovery_stale") == 0, what="in sync again")
    assert w.connected() == {"pod-0", "pod-1"}


async def test_a_rotated_token_is_read_again(world: Factory, tmp_path: Path) -> None:
    w = await world(resync_s=0.5)
    await w.put(0)
    await until_async(lambda: w.connected() == {"pod-0"}, what="pod-0 connected")
    (tmp_path / "token").write_text("r0tated\n")  # the kubelet rotates the projected token
    w.api.token = "r0tated"
    lists = w.api.lists
    await until_async(lambda: w.api.lists >= lists + 2, what="lists with the new token")
    assert w.api.unauthorized == 0 and not w.discovery.stale
