"""Two gateway instances, one Redis: a tenant's limits hold across both, Redis going away
falls back to bounded local limits (never a 5xx), and Redis coming back shares them again."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine_sidecar.backends.sim import SimConfig
from gateway.policy.breaker import BreakerState
from gateway.shared_limits.admission import SharedAdmission
from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.redis_server import RedisServer

PROMPT = [{"role": "user", "content": "Tell me a long story."}]
_PREFIXES = itertools.count()

TENANTS = """
gateway: {default_max_tokens: 14}
tenants:
  - {name: slow, keys: [sk-slow], requests_per_s: 0.1, requests_burst: 5}
  - {name: meter, keys: [sk-meter], tokens_per_min: 6, tokens_burst: 100}
  - {name: pair, keys: [sk-pair], max_concurrent: 2}
  - {name: six, keys: [sk-six], requests_per_s: 0.1, requests_burst: 6}
  - {name: busy, keys: [sk-busy], requests_per_s: 1000, requests_burst: 1000}
"""


def redis_yaml(server: RedisServer) -> str:
    return f"redis: {{url: '{server.url}', key_prefix: p{next(_PREFIXES)}, timeout_ms: 200}}\n"


def pair_of(gateway_yaml: str, profile: str = "instant") -> list[Cluster]:
    sim = SimConfig(model="sim-llama", profile=profile)
    out = [Cluster(gateway_yaml, [{"sim": sim}]) for _ in range(2)]
    for c in out:
        c.start()
    return out


@pytest.fixture(scope="module")
def shared(redis_server: RedisServer) -> Iterator[list[Cluster]]:
    clusters = pair_of(TENANTS + redis_yaml(redis_server), profile="fast")
    yield clusters
    for c in clusters:
        c.stop()


class Clients:
    def __init__(self) -> None:
        self._made: dict[tuple[str, str], openai.OpenAI] = {}

    def __call__(self, c: Cluster, key: str) -> openai.OpenAI:
        made = self._made.get((c.http_url, key))
        if made is None:
            made = self._made[(c.http_url, key)] = openai.OpenAI(
                base_url=f"{c.http_url}/v1", api_key=key, max_retries=0, timeout=30
            )
        return made

    def close(self) -> None:
        for c in self._made.values():
            c.close()


@pytest.fixture
def clients() -> Iterator[Clients]:
    c = Clients()
    yield c
    c.close()


def status(client: openai.OpenAI, max_tokens: int = 2) -> int:
    """The HTTP status of one quick chat request (a 5xx fails the test where it is read)."""
    try:
        client.chat.completions.create(model="sim-llama", messages=PROMPT, max_tokens=max_tokens)
    except openai.APIStatusError as e:
        return e.status_code
    return 200


def alternate(clusters: list[Cluster], clients: Clients, key: str, n: int, **kw: int) -> list[int]:
    return [status(clients(clusters[i % 2], key), **kw) for i in range(n)]


def test_a_requests_bucket_holds_across_two_instances(
    shared: list[Cluster], clients: Clients
) -> None:
    codes = alternate(shared, clients, "sk-slow", 40)
    assert set(codes) <= {200, 429}
    assert 5 <= codes.count(200) <= 6
    assert 429 in codes[0::2] and 429 in codes[1::2]  # both instances refuse


def test_a_tokens_bucket_holds_across_two_instances(
    shared: list[Cluster], clients: Clients
) -> None:
    used = []
    for i in range(40):
        client = clients(shared[i % 2], "sk-meter")
        try:
            r = client.chat.completions.create(model="sim-llama", messages=PROMPT, max_tokens=14)
        except openai.RateLimitError:
            continue
        assert r.usage is not None
        used.append(r.usage.total_tokens)
    # Admitted while the bucket (100, refilling 0.1/s) held the estimate (6 + 14); settled
    # with the real usage after each, so the last one may leave a debt of one request.
    assert len(used) >= 2
    assert sum(used) - used[-1] <= 100 + 1
    assert sum(used) <= 100 + max(used) + 1


def test_max_concurrent_holds_across_two_instances(shared: list[Cluster], clients: Clients) -> None:
    streams = []
    codes = []
    for i in range(6):
        client = clients(shared[i % 2], "sk-pair")
        try:
            s = client.chat.completions.create(
                model="sim-llama", messages=PROMPT, max_tokens=3000, stream=True
            )
        except openai.APIStatusError as e:
            codes.append(e.status_code)
            continue
        next(iter(s))  # running
        streams.append(s)
        codes.append(200)
    assert codes.count(200) == 2 and codes.count(429) == 4
    for s in streams:
        s.close()  # the leases go with them
    until(lambda: status(clients(shared[0], "sk-pair")) == 200, what="a slot freed")


def _gauge(c: Cluster, name: str) -> float:
    assert c.gateway is not None
    text = c.gateway.metrics.render()[0].decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                return s.value
    raise AssertionError(f"no {name}")


def _admission(c: Cluster) -> SharedAdmission:
    assert c.gateway is not None
    a = c.gateway.service.admission
    assert isinstance(a, SharedAdmission)
    return a


def test_redis_gone_falls_back_within_the_bound_then_shares_again(
    tmp_path: Path, clients: Clients
) -> None:
    server = RedisServer(tmp_path)
    server.start()
    clusters = pair_of(TENANTS + redis_yaml(server))
    load_codes: list[int] = []
    stop = threading.Event()

    def load() -> None:  # a tenant with room to spare, all along
        i = 0
        while not stop.is_set():
            load_codes.append(status(clients(clusters[i % 2], "sk-busy")))
            i += 1

    loader = threading.Thread(target=load)
    try:
        until(lambda: all(_admission(c).live == 2 for c in clusters), what="both counted")
        loader.start()
        shared_codes = alternate(clusters, clients, "sk-six", 20)
        assert 6 <= shared_codes.count(200) <= 7

        server.stop()
        fallback_codes = alternate(clusters, clients, "sk-six", 20)
        # Each instance holds ceil(6 / 2) = 3 of the burst while Redis is away: 6 in all,
        # on top of what Redis had admitted (refills of 0.05/s each aside: at most 1 more).
        assert set(fallback_codes) <= {200, 429}
        assert 6 <= fallback_codes.count(200) <= 7
        assert all(_gauge(c, "shardgate_redis_fallback") > 0 for c in clusters)
        admitted = "shardgate_redis_fallback_admissions_total"
        assert sum(_gauge(c, admitted) for c in clusters) >= 6

        server.start()  # empty: full buckets again
        until(
            lambda: all(_admission(c).breaker.state is BreakerState.CLOSED for c in clusters),
            timeout_s=30,
            what="both instances back on Redis",
        )
        # Shared again: the whole burst of 6 (the fallback's parts are spent).
        back_codes = alternate(clusters, clients, "sk-six", 20)
        assert 6 <= back_codes.count(200) <= 7
        stop.set()
        loader.join(30)
        assert load_codes and set(load_codes) == {200}  # served throughout, never a 5xx
    finally:
        stop.set()
        if loader.is_alive():
            loader.join(30)
        for c in clusters:
            c.stop()
        server.stop()
