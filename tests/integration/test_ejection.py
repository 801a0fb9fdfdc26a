"""Outlier ejection end to end: a sidecar whose requests fail is ejected (its ejection counter
and replica state say so), its failed streams finish elsewhere, and new traffic avoids it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine_sidecar.backends.sim import SimConfig, SimFaults
from tests.integration.cluster import Cluster
from tests.integration.poll import until

# (least load only: the same prompt each time would otherwise stay with the engines that
# cache it, and this test needs traffic to keep reaching the failing one)
CONFIG = """
gateway: {default_max_tokens: 8}
routing: {profile: {scorers: [{type: load, weight: 1}]}}
health:
  ejection: {consecutive_failures: 3, base_ejection_time_s: 120, max_ejection_time_s: 120}
retry: {min_retries_per_s: 100}
"""
REQUEST: dict[str, Any] = {
    "model": "sim-llama",
    "messages": [{"role": "user", "content": "Where do I land?"}],
    "max_tokens": 12,
    "extra_body": {"ignore_eos": True},
}


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    good = {"sim": SimConfig(model="sim-llama", profile="instant")}
    bad = {"sim": SimConfig(model="sim-llama", profile="instant", faults=SimFaults(error_rate=1.0))}
    c = Cluster(CONFIG, [bad, good, good])  # sim-0 fails every request after its first token
    c.start()
    yield c
    c.stop()


def gauge(c: Cluster, name: str, replica: str) -> float | None:
    text = httpx.get(f"{c.http_url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels.get("replica") == replica:
                return float(s.value)
    return None


def test_a_failing_sidecar_is_ejected_and_traffic_moves(cluster: Cluster) -> None:
    bad = f"127.0.0.1:{cluster.sidecars[0].port}"
    assert gauge(cluster, "shardgate_ejections_total", "sim-0") == 0
    good = [f"127.0.0.1:{cluster.sidecars[i].port}" for i in (1, 2)]
    # The ejection counter is by replica name, the state by sidecar address.
    until(lambda: gauge(cluster, "shardgate_replica_state", bad) == 2, 10.0, "sim-0 up")
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="x", max_retries=0) as client:
        texts: set[str | None] = set()

        def call() -> str:
            raw = client.chat.completions.with_raw_response.create(**REQUEST)
            texts.add(raw.parse().choices[0].message.content)
            return str(raw.headers["x-shardgate-replica"])

        first_on_bad = 0
        for _ in range(100):
            first_on_bad += call() == bad
            if gauge(cluster, "shardgate_ejections_total", "sim-0") == 1:
                break
        assert gauge(cluster, "shardgate_ejections_total", "sim-0") == 1, "never ejected"
        assert first_on_bad >= 3
        until(lambda: gauge(cluster, "shardgate_replica_state", bad) == 3, 10.0, "ejected")
        assert gauge(cluster, "shardgate_replica_state", good[0]) == 2
        assert {call() for _ in range(30)} <= set(good)
        assert len(texts) == 1 and None not in texts  # failed attempts finished elsewhere
        assert gauge(cluster, "shardgate_ejections_total", "sim-1") == 0
