"""Outlier ejection never empties a pool. The only replica, whose cold engine takes far longer
than the stall timeout over its first step, is not taken out: requests wait for it and complete.
Of four replicas, three of whose engines wedge, at most two are ejected (the cap); the requests
go on, the ones on ejected replicas migrate, and every one completes."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from engine_sidecar.backends.sim import SimBackend, SimConfig, SimFaults
from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.integration.test_stall import metric, stream

STALL_S = 1.0
HEARTBEAT_S = 0.1


def gateway(grace_s: float) -> str:
    return (
        "gateway: {default_max_tokens: 64, request_timeout_s: 90, first_token_timeout_s: 90}\n"
        f"health: {{stall_timeout_s: {STALL_S}, stall_startup_grace_s: {grace_s},\n"
        "  ejection: {consecutive_failures: 1000, base_ejection_time_s: 120,"
        " max_ejection_time_s: 120}}"
    )


def chat(i: int) -> dict[str, Any]:
    return {
        "model": "sim-llama",
        "messages": [{"role": "user", "content": f"Request number {i}."}],
        "max_tokens": 8,
        "ignore_eos": True,
    }


def post(url: str, i: int) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=chat(i), timeout=60)


def test_the_only_replica_in_a_long_first_step_is_waited_for() -> None:
    # The engine's first step lasts four stall timeouts (a cold engine on a busy machine).
    sim = SimConfig(model="sim-llama", profile="fast", first_step_delay_s=4 * STALL_S)
    # (a first step is judged only past the start-up grace and the stall timeout)
    c = Cluster(gateway(30.0), [{"sim": sim, "heartbeat_interval_s": HEARTBEAT_S}])
    c.start()
    try:
        assert c.gateway is not None
        fleet, outliers = c.gateway.fleet, c.gateway.supervisor.outliers
        name = c.sidecars[0].config.name
        link = fleet.by_name[name]
        with ThreadPoolExecutor(8) as pool:
            first = pool.submit(post, c.http_url, 0)
            until(lambda: link.load is not None and link.load.held >= 1, 10.0, "work held")
            assert link.load is not None
            # Heartbeats report the work held and no progress for well past the stall timeout.
            seq = link.load.seq + int(1.5 * STALL_S / HEARTBEAT_S)
            until(lambda: link.load is not None and link.load.seq >= seq, 10.0, "heartbeats")
            assert link.load.steps == 0, "the first step ended too soon to say anything"
            assert name not in fleet.stalled
            assert not outliers.any_ejected(time.monotonic())
            assert [r.routable for r in fleet.pool("sim-llama")] == [True]
            # Requests that come meanwhile wait for the engine too: no 503.
            later = [pool.submit(post, c.http_url, i) for i in range(1, 6)]
            responses = [first.result(), *(f.result() for f in later)]
        for r in responses:
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["finish_reason"] == "length"
        assert metric(c.http_url, "shardgate_ejections_total", replica=name) == 0
    finally:
        c.stop()


def test_three_wedged_of_four_at_most_two_are_ejected_and_requests_complete() -> None:
    wedged = SimConfig(model="sim-llama", profile="fast", faults=SimFaults(hang_after_tokens=20))
    healthy = SimConfig(model="sim-llama", profile="fast")
    specs = [{"sim": wedged, "heartbeat_interval_s": HEARTBEAT_S}] * 3
    c = Cluster(gateway(0.0), [*specs, {"sim": healthy, "heartbeat_interval_s": HEARTBEAT_S}])
    c.start()
    try:
        assert c.gateway is not None
        gw = c.gateway
        names = [s.config.name for s in c.sidecars]

        def ejected() -> list[str]:
            now = time.monotonic()
            return [n for n in names if gw.supervisor.outliers.is_ejected(n, now)]

        most = 0

        def watch() -> list[str]:
            nonlocal most
            out = ejected()
            most = max(most, len(out))
            return out

        with ThreadPoolExecutor(16) as pool:
            streams = [pool.submit(stream, c.http_url, i) for i in range(16)]
            # Two ejected, and the third wedged engine stalled with its requests, kept in.
            until(lambda: len(watch()) == 2, 30.0, "two ejected")
            kept = next(n for n in names[:3] if n not in ejected())
            until(lambda: watch() and kept in gw.fleet.stalled, 30.0, f"{kept} stalled")
            assert names[3] not in ejected()
            assert any(r.name == kept and r.routable for r in gw.fleet.pool("sim-llama"))
            # New requests go on while the three are wedged (to the healthy replica).
            for i in range(4):
                r = post(c.http_url, 100 + i)
                watch()
                assert r.status_code == 200, r.text
                assert r.headers["x-shardgate-replica"] == f"127.0.0.1:{c.sidecars[3].port}"
            # The wedged engines recover: what waited on the one kept in completes too.
            for s in c.sidecars[:3]:
                backend = s.backend
                assert isinstance(backend, SimBackend)
                c.run(_clear(backend))
            results = [f.result() for f in streams]
        assert most <= 2
        assert metric(c.http_url, "shardgate_ejections_total") == 2  # (they last 120 s)
        assert all(finish == "length" and text for text, finish, _ in results)
        assert metric(c.http_url, "shardgate_requests_total", outcome="length") == 16 + 4
        assert metric(c.http_url, "shardgate_ejections_total", replica=kept) == 0
    finally:
        c.stop()


async def _clear(backend: SimBackend) -> None:
    backend.set_faults(SimFaults())
