"""A wedged engine inside a live sidecar: heartbeats go on, no request advances. Its streams
migrate and finish whole, it is ejected, and nothing waits for the request deadline."""

from __future__ import annotations

import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
from prometheus_client.parser import text_string_to_metric_families

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.backends.sim.config import SimFaults
from tests.integration.cluster import Cluster

STREAMS = 24
TOKENS = 120
# The deadlines are far above the stall timeout: a stream left on the wedged engine would end
# with a timeout error, not with its text. Failures alone never eject here: an ejection is the
# stall's. The engines are fresh: no start-up grace past their first step.
GATEWAY = (
    "gateway: {default_max_tokens: 64, request_timeout_s: 90, first_token_timeout_s: 90}\n"
    "health: {stall_timeout_s: 1.0, stall_startup_grace_s: 0,\n"
    "  ejection: {consecutive_failures: 1000}}"
)


def request(i: int) -> dict[str, Any]:
    return {
        "model": "sim-llama",
        "messages": [{"role": "user", "content": f"Stream number {i}, keep going."}],
        "max_tokens": TOKENS,
        "extra_body": {"ignore_eos": True},
    }


def stream(url: str, i: int) -> tuple[str, str | None, str]:
    """(text, finish reason, the replica that first took it); raises what the client raised."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)
    try:
        raw = client.chat.completions.with_raw_response.create(**request(i), stream=True)
        pieces: list[str] = []
        finish = None
        for chunk in raw.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        return "".join(pieces), finish, raw.headers["x-shardgate-replica"]
    finally:
        client.close()


def references() -> list[str]:
    """The same requests on an undisturbed engine."""
    c = Cluster(GATEWAY, [{"sim": SimConfig(model="sim-llama", profile="fast")}])
    c.start()
    try:
        return [stream(c.http_url, i)[0] for i in range(STREAMS)]
    finally:
        c.stop()


def metric(url: str, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_streams_leave_a_wedged_engine_whole_and_it_is_ejected() -> None:
    expected = references()
    assert all(len(t) > 0 for t in expected)
    healthy = SimConfig(model="sim-llama", profile="fast")
    wedged = SimConfig(model="sim-llama", profile="fast", faults=SimFaults(hang_after_tokens=200))
    c = Cluster(
        GATEWAY,
        [
            {"sim": wedged, "heartbeat_interval_s": 0.1},
            {"sim": healthy, "heartbeat_interval_s": 0.1},
        ],
    )
    c.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: stream(c.http_url, i), range(STREAMS)))
        assert c.gateway is not None
        wedged_name = c.sidecars[0].config.name
        wedged_address = f"127.0.0.1:{c.sidecars[0].port}"
        # Streams did start on the wedged engine, and each one finished whole, as undisturbed.
        assert any(first == wedged_address for _, _, first in results)
        for i, (text, finish, _) in enumerate(results):
            assert finish == "length", f"stream {i}"
            assert text == expected[i], f"stream {i}"
        assert c.gateway.supervisor.migrations >= 1
        assert metric(c.http_url, "shardgate_ejections_total", replica=wedged_name) >= 1
        assert metric(c.http_url, "shardgate_requests_total", outcome="length") == STREAMS
        # Its streams gone, it holds nothing: no longer stalled, routable again (ejection aside).
        fleet = c.gateway.fleet
        deadline = time.monotonic() + 20
        while wedged_name in fleet.stalled or not any(
            r.name == wedged_name and r.routable for r in fleet.pool("sim-llama")
        ):
            assert time.monotonic() < deadline, "the wedged sidecar stayed out"
            time.sleep(0.02)
    finally:
        c.stop()
