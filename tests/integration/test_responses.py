"""OpenAI's Responses API through the official `openai` SDK against sim sidecars: create,
stream, background runs followed, dropped and resumed with `starting_after`, cancel,
previous_response_id, store false, tenants, the request deadline, and errors in OpenAI's shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.backends.sim.config import SimFaults
from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.integration.test_cancellation import running

GATEWAY_YAML = """
gateway: {default_max_tokens: 16, request_timeout_s: 8}
tenants:
  - {name: team, keys: [sk-team]}
  - {name: other, keys: [sk-other]}
  - {name: free, keys: [sk-free], requests_per_s: 0.001, requests_burst: 1}
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


def client_of(cluster: Cluster, key: str = "sk-team") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key=key, max_retries=0)


@pytest.fixture
def client(cluster: Cluster) -> Iterator[openai.OpenAI]:
    with client_of(cluster) as c:
        yield c


def create(client: openai.OpenAI, **fields: Any) -> Response:
    args: dict[str, Any] = {"model": "sim-llama", "input": "Tell me about shards."}
    return client.responses.create(**{**args, **fields})


def deltas(events: list[ResponseStreamEvent]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def test_create_answers_a_response_object(client: openai.OpenAI) -> None:
    r = create(client, instructions="Be terse.", max_output_tokens=12, temperature=0.5)
    assert r.id.startswith("resp_") and r.object == "response"
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.model == "sim-llama" and r.instructions == "Be terse." and r.temperature == 0.5
    [item] = r.output
    assert item.type == "message" and item.id.startswith("msg_") and item.role == "assistant"
    assert r.output_text
    assert r.usage is not None and r.usage.output_tokens == 12
    assert r.usage.total_tokens == r.usage.input_tokens + 12 and r.usage.input_tokens > 0


def test_stream_has_the_events_in_order_and_the_same_text(client: openai.OpenAI) -> None:
    whole = create(client, max_output_tokens=20)
    events = list(create(client, max_output_tokens=20, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    n = len(kinds) - 8
    assert n > 1
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * n,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    done = events[-1]
    assert done.type == "response.completed"
    assert deltas(events) == whole.output_text == done.response.output_text
    text_done = events[-4]
    assert text_done.type == "response.output_text.done" and text_done.text == whole.output_text
    assert done.response.usage == whole.usage


def test_background_is_followed_dropped_and_resumed(client: openai.OpenAI) -> None:
    r = create(client, model="sim-slow", max_output_tokens=60, background=True, extra_body=LONG)
    assert r.background and r.status in ("queued", "in_progress") and r.output == []
    # Follow it live, drop the connection after a few events, and come back for the rest.
    first: list[ResponseStreamEvent] = []
    with client.responses.retrieve(r.id, stream=True) as stream:
        for event in stream:
            first.append(event)
            if event.sequence_number == 9:
                break
    assert client.responses.retrieve(r.id).status == "in_progress"  # it ran on without us
    rest = list(client.responses.retrieve(r.id, stream=True, starting_after=9))
    events = first + rest
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"
    done = client.responses.retrieve(r.id)
    assert done.status == "incomplete" and done.usage is not None
    assert done.usage.output_tokens == 60
    assert deltas(events) == done.output_text
    # A finished one replays from anywhere, the same events.
    again = list(client.responses.retrieve(r.id, stream=True, starting_after=4))
    assert [e.model_dump() for e in again] == [e.model_dump() for e in events[5:]]


def test_background_stream_from_create(client: openai.OpenAI) -> None:
    events = list(create(client, max_output_tokens=10, background=True, stream=True))
    assert events[0].type == "response.created" and events[0].response.status == "queued"
    assert events[-1].type == "response.completed"
    stored = client.responses.retrieve(events[0].response.id)
    assert stored.output_text == deltas(events)


def test_cancel_aborts_a_background_response(cluster: Cluster, client: openai.OpenAI) -> None:
    until(lambda: running(cluster) == 0, what="an idle fleet")
    r = create(client, model="sim-slow", max_output_tokens=3000, background=True, extra_body=LONG)
    until(lambda: client.responses.retrieve(r.id).status == "in_progress", what="it runs")
    assert running(cluster) == 1
    cancelled = client.responses.cancel(r.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(r.id).status == "cancelled"
    until(lambda: running(cluster) == 0, what="the engine request aborted")
    # Its events end where it was cancelled: it does not run on to an end of its own.
    events = list(client.responses.retrieve(r.id, stream=True))
    assert events[0].type == "response.created"
    assert not {"response.completed", "response.failed"} & {e.type for e in events}
    assert client.responses.retrieve(r.id).status == "cancelled"


def test_a_background_response_is_bounded_by_the_deadline(client: openai.OpenAI) -> None:
    # 3000 tokens at 20 ms each run well past the gateway's 8 s deadline.
    r = create(client, model="sim-slow", max_output_tokens=3000, background=True, extra_body=LONG)
    until(lambda: client.responses.retrieve(r.id).status == "failed", 60.0, "it timed out")
    failed = client.responses.retrieve(r.id)
    assert failed.error is not None and "deadline" in failed.error.message
    events = list(client.responses.retrieve(r.id, stream=True))
    assert events[-1].type == "response.failed"


def test_previous_response_id_continues_the_conversation(client: openai.OpenAI) -> None:
    first = create(client, instructions="Be terse.", max_output_tokens=8)
    second = create(client, input="Go on.", previous_response_id=first.id, max_output_tokens=8)
    assert second.previous_response_id == first.id
    # The same conversation through chat completions: the same prompt, the same answer.
    chat = client.chat.completions.create(
        model="sim-llama",
        max_tokens=8,
        messages=[
            {"role": "user", "content": "Tell me about shards."},
            {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "Go on."},
        ],
    )
    assert chat.choices[0].message.content == second.output_text
    assert chat.usage is not None and second.usage is not None
    assert chat.usage.prompt_tokens == second.usage.input_tokens


def test_store_false_keeps_nothing(client: openai.OpenAI) -> None:
    r = create(client, store=False, max_output_tokens=4)
    assert r.output_text and r.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError) as err:
        create(client, previous_response_id=r.id)
    assert err.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_another_tenant_gets_404(cluster: Cluster, client: openai.OpenAI) -> None:
    r = create(client, max_output_tokens=4, background=True)
    assert client.responses.retrieve(r.id).id == r.id
    with client_of(cluster, "sk-other") as other:
        with pytest.raises(openai.NotFoundError) as err:
            other.responses.retrieve(r.id)
        assert err.value.body["param"] == "response_id"  # type: ignore[index]
        with pytest.raises(openai.NotFoundError):
            other.responses.retrieve(r.id, stream=True)
        with pytest.raises(openai.NotFoundError):
            other.responses.cancel(r.id)
        with pytest.raises(openai.NotFoundError):
            create(other, previous_response_id=r.id)


def test_admission_is_chat_completions_own(cluster: Cluster) -> None:
    """The tenant's buckets count responses as chat requests: a background one is refused at
    once, as a 429 with its retry-after, never accepted and failed later."""
    with client_of(cluster, "sk-free") as free:
        assert create(free, max_output_tokens=2).status == "incomplete"
        with pytest.raises(openai.RateLimitError) as err:
            create(free, max_output_tokens=2, background=True)
        assert err.value.response.headers["retry-after"]
        with pytest.raises(openai.RateLimitError):
            free.chat.completions.create(
                model="sim-llama", messages=[{"role": "user", "content": "hi"}]
            )
    with client_of(cluster, "sk-nobody") as nobody, pytest.raises(openai.AuthenticationError):
        create(nobody)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "function", "name": "f", "parameters": {}}]}, "tools"),
        ({"background": True, "store": False}, "background"),
        ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
        (
            {"input": [{"type": "web_search_call", "id": "ws"}]},
            "input[0].type",
        ),
        ({"temperature": 3}, "temperature"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"text": {"format": {"type": "json_object"}}}, "text.format"),
    ],
)
def test_bad_requests_are_400s_naming_the_field(
    client: openai.OpenAI, fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        create(client, **fields)
    body = err.value.body
    assert (
        isinstance(body, dict)
        and body["param"] == param
        and body["type"] == "invalid_request_error"
    )


def test_resume_from_events_of_a_response_that_is_not_background(client: openai.OpenAI) -> None:
    r = create(client, max_output_tokens=4)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.retrieve(r.id, stream=True)
    assert err.value.body["param"] == "stream"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(r.id)


@pytest.fixture
def small() -> Iterator[Cluster]:
    """A gateway whose store holds one response."""
    c = Cluster(
        "gateway: {responses: {max_responses: 1}}\n",
        [{"sim": SimConfig(model="sim-llama", faults=SimFaults(slow_token_s=0.02))}],
    )
    c.start()
    yield c
    c.stop()


def test_a_full_store_refuses_background_and_keeps_no_more(small: Cluster) -> None:
    with client_of(small, "none") as client:
        a = create(client, max_output_tokens=3000, background=True, extra_body=LONG)
        with pytest.raises(openai.InternalServerError) as err:
            create(client, max_output_tokens=4, background=True)
        assert err.value.status_code == 503 and "store is full" in err.value.message
        raw = client.responses.with_raw_response.create(
            model="sim-llama", input="hi", max_output_tokens=4
        )
        assert raw.headers["x-shardgate-stored"] == "false"
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(raw.parse().id)
        client.responses.cancel(a.id)  # finished now: the next one may evict it
        b = create(client, max_output_tokens=4, background=True)
        assert client.responses.retrieve(b.id).id == b.id
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(a.id)
