"""Streams of several engine requests (n > 1) and streams still queued survive their client as a
single running stream does: the engine requests run on for detach_grace_s, a reader reattached
through GET /v1/streams/{id} gets the rest with no gap and no duplicate, and when nobody comes
back they are aborted and their tokens settled."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletionChunk

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.integration.test_cancellation import running
from tests.integration.test_queued_stream import Stream, blocker, keepalives
from tests.integration.test_stream_resume import (
    abandoned,
    post_stream,
    read_events,
    reattach,
)

GATEWAY_YAML = """
gateway:
  default_max_tokens: 64
  detach_grace_s: 3
  resumable_streams: ["/v1/chat/completions", "/v1/completions", "shardgate.v1.Gateway/Generate"]
tenants:
  - {name: alpha, keys: [sk-alpha]}
"""
MESSAGES: list[Any] = [{"role": "user", "content": "tell me three long stories"}]
SEEDED: dict[str, Any] = {"temperature": 1.0, "seed": 11, "max_tokens": 1500}


@pytest.fixture(scope="module")
def kept() -> Iterator[Cluster]:
    sim = SimConfig(model="sim-llama", profile="fast", max_model_len=8192)
    c = Cluster(GATEWAY_YAML, [{"sim": sim}])
    c.start()
    yield c
    c.stop()


def client(cluster: Cluster, key: str = "sk-alpha") -> openai.OpenAI:
    return openai.OpenAI(base_url=cluster.http_url + "/v1", api_key=key, max_retries=0)


def texts_of(chunks: list[ChatCompletionChunk], n: int) -> list[str]:
    texts = [""] * n
    for chunk in chunks:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    return texts


def undisturbed(cluster: Cluster, n: int, **fields: Any) -> list[str]:
    with client(cluster) as api:
        out = api.chat.completions.create(
            model="sim-llama", messages=MESSAGES, n=n, extra_body={"ignore_eos": True}, **fields
        )
        return [c.message.content or "" for c in sorted(out.choices, key=lambda c: c.index)]


def rest_from(api: openai.OpenAI, sid: str, last: int | None) -> list[ChatCompletionChunk]:
    """The SDK reattached to stream `sid` after event `last` (None: from the start)."""
    headers = {"Last-Event-ID": f"{sid}:{last}"} if last is not None else {}
    rest = api.get(
        f"/streams/{sid}",
        cast_to=ChatCompletionChunk,
        stream=True,
        stream_cls=openai.Stream[ChatCompletionChunk],
        options={"headers": headers},
    )
    return list(rest)


def test_sdk_n3_stream_dropped_and_reattached_equals_an_undisturbed_run(kept: Cluster) -> None:
    whole = undisturbed(kept, 3, **SEEDED)
    until(lambda: running(kept) == 0, what="an idle engine")
    api = client(kept)
    raw = api.chat.completions.with_raw_response.create(
        model="sim-llama",
        messages=MESSAGES,
        n=3,
        stream=True,
        extra_body={"ignore_eos": True},
        **SEEDED,
    )
    sid = raw.headers["x-shardgate-stream-id"]
    stream = raw.parse()
    head: list[ChatCompletionChunk] = []
    for chunk in stream:
        head.append(chunk)
        if len(head) == 30:
            break
    stream.close()  # the client drops mid-way (one event per chunk, numbered from 1)
    assert running(kept) == 3, "its engine requests run on"
    tail = rest_from(api, sid, len(head))
    api.close()
    assert texts_of(head + tail, 3) == whole
    assert all(len(t) > 1000 for t in whole) and len(set(whole)) == 3
    roles = [c.index for chunk in head + tail for c in chunk.choices if c.delta.role]
    finishes = [c.index for chunk in head + tail for c in chunk.choices if c.finish_reason]
    assert sorted(roles) == sorted(finishes) == [0, 1, 2]  # each once


def test_raw_n3_drop_and_reattach_has_every_event_once(kept: Cluster) -> None:
    whole = undisturbed(kept, 3, **SEEDED)
    until(lambda: running(kept) == 0, what="an idle engine")
    body = {"model": "sim-llama", "messages": MESSAGES, "n": 3, "stream": True,
            "ignore_eos": True, **SEEDED}  # fmt: skip
    conn, resp = post_stream(kept, body)
    sid = resp.headers["x-shardgate-stream-id"]
    head = read_events(resp, 12)
    conn.close()
    conn2, resp2 = reattach(kept, sid, last=head[-1][0])
    assert resp2.status == 200
    tail = read_events(resp2)
    conn2.close()
    ids = [int(i.rpartition(":")[2]) for i, _ in head + tail]
    assert ids == list(range(1, len(ids) + 1))  # every event once, in order
    assert tail[-1][1] == "[DONE]"
    texts = [""] * 3
    for _, data in head + tail[:-1]:
        for c in json.loads(data)["choices"]:
            texts[c["index"]] += c["delta"].get("content") or ""
    assert texts == whole


def test_a_batch_of_prompts_dropped_and_reattached_equals_an_undisturbed_run(
    kept: Cluster,
) -> None:
    fields: dict[str, Any] = {**SEEDED, "prompt": ["Once upon", "a time"], "model": "sim-llama"}
    with client(kept) as api:
        out = api.completions.create(**fields, extra_body={"ignore_eos": True})
        whole = [c.text for c in sorted(out.choices, key=lambda c: c.index)]
    until(lambda: running(kept) == 0, what="an idle engine")
    api = client(kept)
    raw = api.completions.with_raw_response.create(
        **fields, stream=True, extra_body={"ignore_eos": True}
    )
    sid = raw.headers["x-shardgate-stream-id"]
    stream = raw.parse()
    head: list[Completion] = []
    for chunk in stream:
        head.append(chunk)
        if len(head) == 20:
            break
    stream.close()  # the client drops mid-way
    rest = api.get(
        f"/streams/{sid}",
        cast_to=Completion,
        stream=True,
        stream_cls=openai.Stream[Completion],
        options={"headers": {"Last-Event-ID": f"{sid}:{len(head)}"}},
    )
    texts = ["", ""]
    for chunk in [*head, *rest]:
        for c in chunk.choices:
            texts[c.index] += c.text
    api.close()
    assert texts == whole and all(len(t) > 1000 for t in whole)


def test_an_n3_stream_nobody_reattaches_is_aborted_after_the_grace_and_settled(
    kept: Cluster,
) -> None:
    long = {**SEEDED, "max_tokens": 4000}
    body = {"model": "sim-llama", "messages": MESSAGES, "n": 3, "stream": True,
            "ignore_eos": True, **long}  # fmt: skip
    head, tail, settled = abandoned(kept, body, 6, 3)
    chunks = [json.loads(d) for _, d in head + tail[:-2]]
    content = [c for ch in chunks for c in ch["choices"] if c["delta"].get("content")]
    assert {c["index"] for c in content} == {0, 1, 2}
    assert len(content) < 3 * 4000
    # The tokens generated are settled (billed) as for any client that leaves.
    assert settled >= len(content)


QUEUED_YAML = """
gateway:
  default_max_tokens: 16
  keepalive_s: 0.05
  detach_grace_s: 3
  resumable_streams: [/v1/chat/completions]
model_capacity: {sim-llama: 1}
"""
PROMPT: list[Any] = [{"role": "user", "content": "Tell me a story."}]  # (Stream's prompt)


@pytest.fixture(scope="module")
def queued() -> Iterator[Cluster]:
    c = Cluster(QUEUED_YAML, [{"sim": SimConfig(model="sim-llama", profile="fast")}])
    c.start()
    yield c
    c.stop()


def test_a_queued_stream_whose_client_left_runs_when_placed_and_is_reattached(
    queued: Cluster,
) -> None:
    fields: dict[str, Any] = {"max_tokens": 40, "seed": 5, "extra_body": {"ignore_eos": True}}
    with client(queued, "none") as api:
        whole = api.chat.completions.create(model="sim-llama", messages=PROMPT, **fields)
    assert queued.gateway is not None
    store = queued.gateway.streams.store
    hold = blocker(queued)
    try:
        with client(queued, "none") as gone:
            raw = gone.chat.completions.with_raw_response.create(
                model="sim-llama", messages=PROMPT, stream=True, **fields
            )  # (its head leaves with its first keep-alive, the request still queued)
            sid = raw.headers["x-shardgate-stream-id"]
            raw.parse().close()  # the client leaves before its first token
        log = store.logs[sid]
        until(lambda: log.reader is None, what="the gateway saw its client leave")
        assert not log.finished, "a queued stream whose client left waits on, detached"
        assert len(queued.gateway.scheduler.pools["sim-llama"].queue) == 1
    finally:
        hold.close()  # the slot frees: the detached request is placed
    with client(queued, "none") as api:
        tail = rest_from(api, sid, None)
    assert texts_of(tail, 1) == [whole.choices[0].message.content]
    roles = [c.choices[0].delta.role for c in tail if c.choices and c.choices[0].delta.role]
    assert roles == ["assistant"] and tail[0].choices[0].delta.role == "assistant"
    assert tail[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_a_queued_stream_nobody_reattaches_leaves_the_queue_after_the_grace(
    queued: Cluster,
) -> None:
    assert queued.gateway is not None
    store = queued.gateway.streams.store
    hold = blocker(queued)
    pool = queued.gateway.scheduler.pools["sim-llama"]  # (made by the model's first request)
    try:
        s = Stream(queued, 8)
        s.read_until(lambda s: keepalives(s) >= 2)
        sid = s.header("x-shardgate-stream-id")
        assert sid
        s.close()  # the client leaves while queued
        log = store.logs[sid]
        until(lambda: log.reader is None, what="the gateway saw its client leave")
        assert not log.finished, "it waits on, detached"
        # Nobody comes back: after the grace it leaves the queue, never placed.
        until(lambda: log.finished, 15.0, "the abandoned request ended")
        until(lambda: len(pool.queue) == 0, what="it left the queue")
    finally:
        hold.close()
    conn, resp = reattach(queued, sid, key="none")
    events = read_events(resp)
    conn.close()
    assert [json.loads(d)["error"]["type"] for _, d in events[:-1]] == ["client_gone"]
    assert events[-1][1] == "[DONE]"


def test_a_queued_n2_stream_whose_client_left_is_reattached_whole(queued: Cluster) -> None:
    fields: dict[str, Any] = {
        "n": 2, "max_tokens": 30, "seed": 9, "temperature": 1.0, "extra_body": {"ignore_eos": True}
    }  # fmt: skip
    with client(queued, "none") as api:
        out = api.chat.completions.create(model="sim-llama", messages=PROMPT, **fields)
    whole = [c.message.content for c in sorted(out.choices, key=lambda c: c.index)]
    assert queued.gateway is not None
    store = queued.gateway.streams.store
    hold = blocker(queued)
    try:
        with client(queued, "none") as gone:
            raw = gone.chat.completions.with_raw_response.create(
                model="sim-llama", messages=PROMPT, stream=True, **fields
            )  # (its head leaves with its first keep-alive, both choices still queued)
            sid = raw.headers["x-shardgate-stream-id"]
            raw.parse().close()
        log = store.logs[sid]
        until(lambda: log.reader is None, what="the gateway saw its client leave")
        assert not log.finished, "its choices wait on, detached"
    finally:
        hold.close()
    with client(queued, "none") as api:
        tail = rest_from(api, sid, None)
    assert texts_of(tail, 2) == whole
