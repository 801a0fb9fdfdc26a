"""Anthropic's Messages API through the gateway, driven by the official `anthropic` SDK against
sim sidecars: messages.create, messages.stream, count_tokens, stop sequences, keys in
`x-api-key` and in `Authorization: Bearer`, every error as the SDK's exception type, and the
same priorities, preemption and migration as chat completions."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from unittest.mock import ANY

import anthropic
import openai
import pytest

from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.backends.sim.config import SimFaults
from tests.integration.cluster import Cluster, cut
from tests.integration.test_tenants import samples, total

GATEWAY_YAML = """
gateway: {default_max_tokens: 16}
tenants:
  - {name: team, keys: [sk-team]}
  - {name: free, keys: [sk-free], requests_per_s: 0.001, requests_burst: 1}
models: [sim-llama, sim-eos, sim-busy, sim-broken]
model_limits:
  sim-busy: {requests_per_s: 0.001, requests_burst: 1}
"""
KEY = "sk-team"
MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about shards."}]
SYSTEM = "You are terse."


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    llama = SimConfig(model="sim-llama", profile="fast", eos_every=0)
    c = Cluster(
        GATEWAY_YAML,
        [
            {"sim": llama},
            {"sim": llama},
            {"sim": SimConfig(model="sim-eos", profile="fast", eos_every=2)},
            {"sim": SimConfig(model="sim-busy", profile="fast")},
            {"sim": SimConfig(model="sim-broken", faults=SimFaults(error_rate=1.0))},
        ],
    )
    c.start()
    yield c
    c.stop()


@pytest.fixture
def client(cluster: Cluster) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=cluster.http_url, api_key=KEY, max_retries=0) as c:
        yield c


def create(client: anthropic.Anthropic, **fields: Any) -> anthropic.types.Message:
    args: dict[str, Any] = {"model": "sim-llama", "max_tokens": 24, "messages": MESSAGES}
    return client.messages.create(**{**args, **fields})


def text_of(message: anthropic.types.Message) -> str:
    [block] = message.content
    assert block.type == "text"
    return block.text


def test_create_answers_a_message_object(client: anthropic.Anthropic) -> None:
    sampling = {"temperature": 0.7, "top_p": 0.9, "top_k": 20}
    m = create(client, system=SYSTEM, metadata={"user_id": "u-1"}, extra_body=sampling)
    assert m.id.startswith("msg_") and m.type == "message" and m.role == "assistant"
    assert m.model == "sim-llama"
    assert m.stop_reason == "max_tokens" and m.stop_sequence is None
    assert m.usage.output_tokens == 24 and m.usage.input_tokens > 0
    assert text_of(m)


def test_the_answer_is_the_chat_endpoints_for_the_same_messages(
    cluster: Cluster, client: anthropic.Anthropic
) -> None:
    m = create(client, system=SYSTEM)
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key=KEY, max_retries=0) as o:
        chat = o.chat.completions.create(
            model="sim-llama",
            messages=[{"role": "system", "content": SYSTEM}, *MESSAGES],
            max_tokens=24,
        )
    assert chat.usage is not None
    assert text_of(m) == chat.choices[0].message.content
    assert m.usage.input_tokens == chat.usage.prompt_tokens


def test_stream_events_text_and_final_message(client: anthropic.Anthropic) -> None:
    reference = create(client, system=SYSTEM)
    kinds: list[str] = []
    texts: list[str] = []
    with client.messages.stream(
        model="sim-llama", max_tokens=24, system=SYSTEM, messages=MESSAGES
    ) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "text":
                texts.append(event.text)
        final = stream.get_final_message()
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert "".join(texts) == text_of(reference) == text_of(final)
    assert final.stop_reason == "max_tokens"
    assert final.usage.input_tokens == reference.usage.input_tokens
    assert final.usage.output_tokens == 24


def post(cluster: Cluster, path: str, body: dict[str, Any], **headers: str) -> tuple[int, bytes]:
    req = urllib.request.Request(
        f"{cluster.http_url}{path}",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", **headers},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_wire_is_anthropics_event_sequence(cluster: Cluster) -> None:
    """As the bytes go (the SDK hides pings): `event:` and `data:` lines, in Anthropic's order."""
    body = {"model": "sim-llama", "max_tokens": 5, "messages": MESSAGES, "stream": True}
    status, raw = post(cluster, "/v1/messages", body, **{"x-api-key": KEY})
    assert status == 200
    events = []
    for block in raw.decode().split("\n\n")[:-1]:
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        events.append((name[7:], json.loads(data[6:])))
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * 5,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in events)
    assert events[-2][1]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert events[-2][1]["usage"] == {"output_tokens": 5}


def test_a_stop_sequence_ends_it_and_is_named(client: anthropic.Anthropic) -> None:
    reference = text_of(create(client, max_tokens=40))
    stop = " " + reference.split()[6]  # a whole word: its first occurrence ends the text
    expected = reference[: reference.index(stop)]
    m = create(client, max_tokens=40, stop_sequences=["never-happens", stop])
    assert (m.stop_reason, m.stop_sequence) == ("stop_sequence", stop)
    assert text_of(m) == expected
    with client.messages.stream(
        model="sim-llama", max_tokens=40, messages=MESSAGES, stop_sequences=[stop]
    ) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)
    assert text_of(final) == expected


def test_end_of_text_is_end_turn(client: anthropic.Anthropic) -> None:
    m = create(client, model="sim-eos", max_tokens=200)
    assert (m.stop_reason, m.stop_sequence) == ("end_turn", None)
    assert m.usage.output_tokens < 200


def test_count_tokens_is_the_input_a_generation_reports(client: anthropic.Anthropic) -> None:
    counted = client.messages.count_tokens(model="sim-llama", system=SYSTEM, messages=MESSAGES)
    assert counted.input_tokens == create(client, system=SYSTEM).usage.input_tokens
    bare = client.messages.count_tokens(model="sim-llama", messages=MESSAGES)
    assert 0 < bare.input_tokens < counted.input_tokens
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="nope", messages=MESSAGES)


@pytest.mark.parametrize("header", ["x-api-key", "Authorization"])
def test_a_key_in_either_header_is_the_tenants(cluster: Cluster, header: str) -> None:
    """Anthropic's API takes `x-api-key`; this SDK version sends its keys as Bearer."""

    def sent(key: str) -> dict[str, str]:
        return {header: key if header == "x-api-key" else f"Bearer {key}"}

    body = {"model": "sim-llama", "max_tokens": 2, "messages": MESSAGES}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        status, raw = post(cluster, path, body, **sent(KEY), **{"anthropic-version": "2023-06-01"})
        assert status == 200, raw
        status, raw = post(cluster, path, body, **sent("sk-wrong"))
        assert status == 401
        assert json.loads(raw)["error"]["type"] == "authentication_error"
    status, raw = post(cluster, "/v1/messages", body)  # no key, and no anonymous tenant
    assert status == 401
    assert json.loads(raw) == {
        "type": "error",
        "error": {"type": "authentication_error", "message": ANY},
    }


def test_bearer_keys_work_like_x_api_key(cluster: Cluster) -> None:
    with anthropic.Anthropic(base_url=cluster.http_url, auth_token=KEY, max_retries=0) as c:
        assert text_of(create(c, max_tokens=3))
        assert c.messages.count_tokens(model="sim-llama", messages=MESSAGES).input_tokens > 0
    with (
        anthropic.Anthropic(base_url=cluster.http_url, auth_token="sk-wrong", max_retries=0) as c,
        pytest.raises(anthropic.AuthenticationError),
    ):
        create(c)


@pytest.mark.parametrize("endpoint", ["create", "count_tokens"])
def test_a_wrong_key_is_an_authentication_error(cluster: Cluster, endpoint: str) -> None:
    with (
        anthropic.Anthropic(base_url=cluster.http_url, api_key="sk-wrong", max_retries=0) as c,
        pytest.raises(anthropic.AuthenticationError) as e,
    ):
        if endpoint == "create":
            create(c)
        else:
            c.messages.count_tokens(model="sim-llama", messages=MESSAGES)
    assert e.value.status_code == 401
    assert e.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid API key"},
    }


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"extra_body": {"temperature": 1.5}}, "'temperature'"),
        ({"extra_body": {"top_k": -1}}, "'top_k'"),
        ({"extra_body": {"output_config": {"effort": "high"}}}, "output_config.effort"),
        ({"tools": [{"name": "f", "input_schema": {"type": "object"}}]}, "tools"),
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
         "messages[0].content[0].type"),
        ({"stop_sequences": [""]}, "stop_sequences[0]"),
    ],
)  # fmt: skip
def test_bad_requests_are_bad_request_errors_naming_the_field(
    client: anthropic.Anthropic, fields: dict[str, Any], words: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as e:
        create(client, **fields)
    assert isinstance(e.value.body, dict) and e.value.body["type"] == "error"
    error = e.value.body["error"]
    assert set(error) == {"type", "message"}
    assert error["type"] == "invalid_request_error" and words in error["message"]


TOOL = {"name": "f", "description": "A tool.", "input_schema": {"type": "object"}}


@pytest.mark.parametrize(
    "fields",
    [{"tools": [TOOL]}, {"tools": [TOOL], "tool_choice": {"type": "any"}}],
)
def test_tools_are_refused_by_name_where_no_engine_serves_them(
    client: anthropic.Anthropic, fields: dict[str, Any]
) -> None:
    with pytest.raises(anthropic.BadRequestError) as e:
        create(client, **fields)
    assert isinstance(e.value.body, dict)
    assert e.value.body["error"]["message"] == (
        "model sim-llama: tools is not supported by its engine."
    )
    with (
        pytest.raises(anthropic.BadRequestError),
        client.messages.stream(
            model="sim-llama", max_tokens=8, messages=MESSAGES, **fields
        ) as stream,
    ):
        stream.until_done()


def test_a_conversation_with_answered_calls_needs_no_tools(client: anthropic.Anthropic) -> None:
    """tool_use / tool_result blocks without tools: the conversation as the engine renders it."""
    use = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"x": 1}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "42"}
    messages = [
        *MESSAGES,
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result, {"type": "text", "text": "And?"}]},
    ]
    m = create(client, messages=messages)
    assert m.stop_reason == "max_tokens" and len(text_of(m)) > 0
    assert m.usage.input_tokens > create(client).usage.input_tokens


def test_an_unknown_model_is_not_found(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as e:
        create(client, model="nope")
    assert e.value.body == {"type": "error", "error": {"type": "not_found_error", "message": ANY}}


def test_over_the_tenants_rate_is_a_rate_limit_error_with_retry_after(cluster: Cluster) -> None:
    with anthropic.Anthropic(base_url=cluster.http_url, api_key="sk-free", max_retries=0) as c:
        create(c, max_tokens=2)
        with pytest.raises(anthropic.RateLimitError) as e:
            create(c, max_tokens=2)
    assert float(e.value.response.headers["retry-after"]) > 0
    assert e.value.body == {"type": "error", "error": {"type": "rate_limit_error", "message": ANY}}


def test_an_overloaded_pool_is_an_overloaded_error(client: anthropic.Anthropic) -> None:
    create(client, model="sim-busy", max_tokens=2)
    with pytest.raises(anthropic.OverloadedError) as e:
        create(client, model="sim-busy", max_tokens=2)
    assert e.value.status_code == 529
    assert float(e.value.response.headers["retry-after"]) > 0
    assert isinstance(e.value.body, dict) and e.value.body["error"]["type"] == "overloaded_error"


def test_an_engine_failure_mid_stream_is_an_error_event(client: anthropic.Anthropic) -> None:
    kinds: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError) as e,
        client.messages.stream(model="sim-broken", max_tokens=50, messages=MESSAGES) as s,
    ):
        kinds.extend(event.type for event in s)
    assert kinds[:2] == ["message_start", "content_block_start"]  # it had started
    assert "message_stop" not in kinds
    assert isinstance(e.value.body, dict) and e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] in {"api_error", "overloaded_error"}


def test_a_stream_migrates_with_identical_text() -> None:
    """The same migration as chat's: a replica that dies mid-stream is replaced unseen."""
    sim = SimConfig(model="sim-llama", profile="fast", eos_every=0)
    c = Cluster("gateway: {default_max_tokens: 16}", [{"sim": sim}, {"sim": sim}])
    c.start()
    try:
        with anthropic.Anthropic(base_url=c.http_url, api_key="none", max_retries=0) as client:
            reference = text_of(create(client, max_tokens=300))
            raw = client.messages.with_raw_response.create(
                model="sim-llama", max_tokens=300, messages=MESSAGES, stream=True
            )
            replica = raw.headers["x-shardgate-replica"]
            [sidecar] = [s for s in c.sidecars if f"127.0.0.1:{s.port}" == replica]
            pieces: list[str] = []
            stop_reason = None
            for i, event in enumerate(raw.parse()):
                if i == 20:
                    c.run(cut(sidecar))
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    pieces.append(event.delta.text)
                if event.type == "message_delta":
                    stop_reason = event.delta.stop_reason
        assert stop_reason == "max_tokens"
        assert "".join(pieces) == reference
        assert c.gateway is not None and c.gateway.supervisor.migrations >= 1
    finally:
        c.stop()


SCHEDULING_YAML = """
gateway: {default_max_tokens: 16}
model_capacity: {sim-llama: 1}
tenants:
  - {name: hi, keys: [sk-hi], default_priority: 10}
  - {name: lo, keys: [sk-lo], default_priority: 0, max_priority: 10}
scheduling:
  preemption: {enabled: true, min_run_s: 0, max_per_request: 3}
"""


@pytest.fixture(scope="module")
def one_slot() -> Iterator[Cluster]:
    """One slot for the model, two tenants of different classes, preemption on."""
    sim = SimConfig(model="sim-llama", profile="fast", eos_every=0)
    c = Cluster(SCHEDULING_YAML, [{"sim": sim}])
    c.start()
    yield c
    c.stop()


def stream_text(c: Cluster, key: str, max_tokens: int, on_delta: Any = None) -> str:
    pieces: list[str] = []
    with (
        anthropic.Anthropic(base_url=c.http_url, api_key=key, max_retries=0) as client,
        client.messages.stream(model="sim-llama", max_tokens=max_tokens, messages=MESSAGES) as s,
    ):
        for text in s.text_stream:
            pieces.append(text)
            if on_delta is not None:
                on_delta(len(pieces))
    return "".join(pieces)


def test_x_priority_is_the_same_class_as_chats_capped_at_the_tenants_maximum(
    one_slot: Cluster,
) -> None:
    def served(cls: str) -> float:
        got = samples(one_slot)
        return total(got, "shardgate_requests_total", outcome="length", **{"class": cls})

    with anthropic.Anthropic(base_url=one_slot.http_url, api_key="sk-lo", max_retries=0) as c:
        for asked, expected in [("50", "10"), ("3", "3"), (None, "0")]:
            before = served(expected)
            headers = {"x-priority": asked} if asked is not None else {}
            create(c, max_tokens=2, extra_headers=headers)
            assert served(expected) == before + 1, asked
        with pytest.raises(anthropic.BadRequestError) as e:
            create(c, max_tokens=2, extra_headers={"x-priority": "urgent"})
    assert isinstance(e.value.body, dict) and "x-priority" in e.value.body["error"]["message"]


def test_a_preempted_stream_pauses_and_resumes_with_identical_text(one_slot: Cluster) -> None:
    reference = stream_text(one_slot, "sk-lo", 300)
    assert one_slot.gateway is not None
    pool = one_slot.gateway.scheduler.pools["sim-llama"]
    before = sum(pool.preemptions.values())
    started = threading.Event()
    high: dict[str, str] = {}

    def run_high() -> None:
        started.wait(30)
        high["text"] = stream_text(one_slot, "sk-hi", 40)

    t = threading.Thread(target=run_high)
    t.start()
    text = stream_text(one_slot, "sk-lo", 300, lambda i: started.set() if i == 20 else None)
    t.join(30)
    assert text == reference
    assert high["text"]
    assert sum(pool.preemptions.values()) == before + 1
