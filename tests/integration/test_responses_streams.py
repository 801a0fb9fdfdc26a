"""The Responses API's background events live in the gateway's one stream store: its bounds
(per stream, per process), its retention and its eviction apply to them as to chat streams,
through the official `openai` SDK's responses.create / .retrieve(stream=True, starting_after=)
/ .cancel."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.backends.sim.config import SimFaults
from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.integration.test_stream_resume import post_stream, read_events

GATEWAY_YAML = """
gateway:
  default_max_tokens: 16
  streams: {max_streams: 1, max_stream_events: 16, retention_s: 4}
  resumable_streams: [/v1/chat/completions]
models: [sim-llama, sim-slow]
"""
LONG: dict[str, Any] = {"ignore_eos": True}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(
        GATEWAY_YAML,
        [
            {"sim": SimConfig(model="sim-llama", profile="fast", eos_every=0)},
            {"sim": SimConfig(model="sim-slow", faults=SimFaults(slow_token_s=0.02))},
        ],
    )
    c.start()
    yield c
    c.stop()


@pytest.fixture
def client(cluster: Cluster) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="none", max_retries=0) as c:
        yield c


def finished(client: openai.OpenAI, rid: str) -> bool:
    return client.responses.retrieve(rid).status in ("completed", "incomplete")


def test_a_background_responses_events_keep_within_the_stream_stores_bound(
    client: openai.OpenAI,
) -> None:
    r = client.responses.create(
        model="sim-llama", input="Tell me.", max_output_tokens=60, background=True, extra_body=LONG
    )
    until(lambda: finished(client, r.id), 30.0, "it finished")
    # Its stream kept its newest 16 events (streams.max_stream_events): not the first.
    with pytest.raises(openai.BadRequestError) as err:
        list(client.responses.retrieve(r.id, stream=True))
    assert err.value.body["param"] == "starting_after"  # type: ignore[index]
    gone = re.search(r"events up to (\d+) are no longer kept", err.value.message)
    assert gone is not None
    last_gone = int(gone.group(1))
    tail = list(client.responses.retrieve(r.id, stream=True, starting_after=last_gone))
    assert [e.sequence_number for e in tail] == list(range(last_gone + 1, last_gone + 17))
    assert tail[-1].type == "response.completed"
    assert last_gone > 60 - 16  # (every delta was an event)


def test_background_responses_and_chat_streams_share_the_stores_room(
    cluster: Cluster, client: openai.OpenAI
) -> None:
    body = {"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}],
            "stream": True, "max_tokens": 3000, "ignore_eos": True}  # fmt: skip
    conn, resp = post_stream(cluster, body, key="")
    assert resp.headers["x-shardgate-stream-id"]
    read_events(resp, 3)
    try:  # a live chat stream holds the store's one stream: no room for a background one
        with pytest.raises(openai.InternalServerError) as err:
            client.responses.create(
                model="sim-llama", input="hi", max_output_tokens=4, background=True
            )
        assert err.value.status_code == 503 and "stream store is full" in err.value.message
    finally:
        conn.close()  # the chat stream ends (no grace): its stream is finished
    assert cluster.gateway is not None
    store = cluster.gateway.streams.store
    until(lambda: not any(not log.finished for log in store.logs.values()), what="it ended")
    # A background response takes its room now (the finished chat stream is evicted first) ...
    r = client.responses.create(
        model="sim-slow", input="hi", max_output_tokens=3000, background=True, extra_body=LONG
    )
    # ... and while it runs, a chat stream is served without resume, and says so.
    raw = client.chat.completions.with_raw_response.create(
        model="sim-llama", messages=[{"role": "user", "content": "hi"}], stream=True, max_tokens=4
    )
    assert raw.headers["x-shardgate-stream-resume"] == "unavailable"
    assert "x-shardgate-stream-id" not in raw.headers
    list(raw.parse())
    assert client.responses.cancel(r.id).status == "cancelled"


def test_a_finished_responses_events_go_at_the_stream_stores_retention(
    client: openai.OpenAI,
) -> None:
    r = client.responses.create(
        model="sim-llama", input="Tell me.", max_output_tokens=4, background=True
    )
    until(lambda: finished(client, r.id), 30.0, "it finished")
    events = list(client.responses.retrieve(r.id, stream=True))
    assert events[0].sequence_number == 0 and events[-1].type == "response.completed"

    def events_gone() -> bool:
        try:
            list(client.responses.retrieve(r.id, stream=True))
        except openai.BadRequestError as e:
            return e.body["param"] == "starting_after"  # type: ignore[no-any-return,index]
        return False

    # streams.retention_s (4 s) after it finished, its events are gone; the response is not
    # (responses.retention_s: 600 s).
    until(events_gone, 30.0, "its events expired from the stream store")
    assert client.responses.retrieve(r.id).output_text == "".join(
        e.delta for e in events if e.type == "response.output_text.delta"
    )
