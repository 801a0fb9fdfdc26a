"""`x-session-id` over HTTP: with the `session` scorer, a session's requests stay on one
replica while different sessions spread over the pool."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster

CONFIG = """
gateway: {default_max_tokens: 4}
routing:
  profile:
    scorers: [{type: load}, {type: session, weight: 2}]
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    sim = {"sim": SimConfig(model="sim-llama", profile="instant")}
    c = Cluster(CONFIG, [sim, sim, sim, sim])
    c.start()
    yield c
    c.stop()


def replica(client: openai.OpenAI, session: str | None) -> str:
    headers = {"x-session-id": session} if session is not None else {}
    raw = client.chat.completions.with_raw_response.create(
        model="sim-llama",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=2,
        extra_headers=headers,
    )
    return raw.headers["x-shardgate-replica"]


def test_a_session_stays_on_one_replica_and_sessions_spread(cluster: Cluster) -> None:
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="x", max_retries=0) as client:
        homes: dict[str, set[str]] = {f"user-{i}": set() for i in range(12)}
        for _ in range(6):
            for session, seen in homes.items():
                seen.add(replica(client, session))
        assert all(len(seen) == 1 for seen in homes.values()), homes
        assert len(set().union(*homes.values())) >= 2  # not one replica for everyone
        # Without the header the same client is spread by load alone.
        assert len({replica(client, None) for _ in range(24)}) >= 2
