"""A kept stream is set up while its request is on the engine, not after its first token (the
first token then only has its chunk to make); one that fails before its head leaves nothing
in the stream store (nobody was told its id)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.backends.sim.config import SimFaults
from tests.integration.cluster import Cluster
from tests.integration.poll import until

CONFIG = """
gateway: {default_max_tokens: 16, keepalive_s: 60, first_token_timeout_s: 1.0}
"""


@pytest.fixture(scope="module")
def stalled() -> Iterator[Cluster]:
    # The engine stops stepping after its first token: a request after that gets none.
    sim = SimConfig(model="sim-llama", faults=SimFaults(hang_after_tokens=1))
    c = Cluster(CONFIG, [{"sim": sim}])
    c.start()
    yield c
    c.stop()


def test_the_stream_is_kept_before_its_first_token_and_forgotten_when_it_fails(
    stalled: Cluster,
) -> None:
    assert stalled.gateway is not None and stalled.gateway.streams is not None
    store = stalled.gateway.streams.store
    messages = [{"role": "user", "content": "x"}]
    body = {
        "model": "sim-llama",
        "stream": True,
        "stream_options": {"resumable": True},
        "messages": messages,
    }
    answer: list[httpx.Response] = []
    first = {"model": "sim-llama", "messages": messages, "max_tokens": 1}
    assert httpx.post(stalled.http_url + "/v1/chat/completions", json=first).status_code == 200
    until(lambda: not store.logs, what="no stream kept yet")  # (that one streamed nothing)

    def ask() -> None:
        with httpx.Client(timeout=30) as client:
            answer.append(client.post(stalled.http_url + "/v1/chat/completions", json=body))

    t = threading.Thread(target=ask)
    t.start()
    until(lambda: len(store.logs) == 1, what="the stream's log, with no token yet")
    (log,) = store.logs.values()
    assert not log.events and not log.finished and log.reader is None
    t.join(30)
    (resp,) = answer
    assert resp.status_code == 504, resp.text  # the first-output limit, before any head
    assert "stream-id" not in " ".join(resp.headers)
    assert not store.logs and not store.finished and store.nbytes == 0
