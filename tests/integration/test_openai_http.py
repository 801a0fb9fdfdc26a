"""The OpenAI HTTP/SSE API through the official SDK, against a real local cluster."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.integration.cluster import Cluster

MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about shards."}]


@pytest.fixture
def client(cluster: Cluster) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="none", max_retries=0) as c:
        yield c


def post(cluster: Cluster, path: str, body: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
    req = urllib.request.Request(
        f"{cluster.http_url}{path}", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read()), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def test_models_list(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == ["sim-llama"]
    assert client.models.retrieve("sim-llama").id == "sim-llama"


def test_health_answers_as_vllm_serve_s(cluster: Cluster) -> None:
    """Clients probe `vllm serve`'s /health (guidellm does, before it sends anything)."""
    with urllib.request.urlopen(f"{cluster.http_url}/health", timeout=10) as r:
        assert (r.status, r.read()) == (200, b"")


def test_streamed_chat_has_one_chunk_per_token_and_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="sim-llama",
        messages=MESSAGES,
        stream=True,
        max_tokens=64,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    contents: list[str] = []
    finish = None
    usage = None
    roles = []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            assert chunk.choices == []
            continue
        choice = chunk.choices[0]
        if choice.delta.role:
            roles.append(choice.delta.role)
        if choice.delta.content:
            contents.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
    assert roles == ["assistant"]
    assert len(contents) == 64
    assert finish == "length"
    assert usage is not None
    assert usage.completion_tokens == 64
    assert usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + 64


def test_same_request_same_text_streamed_or_not(client: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {"model": "sim-llama", "messages": MESSAGES, "max_tokens": 40}
    full = client.chat.completions.create(**kwargs)
    again = client.chat.completions.create(**kwargs)
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(**kwargs, stream=True)
        if c.choices
    )
    text = full.choices[0].message.content
    assert text
    assert text == again.choices[0].message.content == streamed
    assert full.usage is not None
    assert full.usage.completion_tokens <= 40
    assert full.choices[0].finish_reason in ("stop", "length")


def test_completions_stream_and_unary(client: openai.OpenAI) -> None:
    unary = client.completions.create(
        model="sim-llama", prompt="Once upon a time", max_tokens=20, extra_body={"ignore_eos": True}
    )
    assert unary.usage is not None and unary.usage.completion_tokens == 20
    assert unary.choices[0].finish_reason == "length"
    pieces = [
        c.choices[0].text
        for c in client.completions.create(
            model="sim-llama",
            prompt="Once upon a time",
            max_tokens=20,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        if c.choices and c.choices[0].text
    ]
    assert len(pieces) == 20
    assert "".join(pieces) == unary.choices[0].text


def test_eos_ends_a_generation_early_without_ignore_eos(client: openai.OpenAI) -> None:
    # The sim emits EOS now and then: over many prompts some finish with "stop" before the limit.
    finishes = set()
    for i in range(30):
        r = client.completions.create(model="sim-llama", prompt=f"prompt {i}", max_tokens=400)
        assert r.usage is not None
        finishes.add(r.choices[0].finish_reason)
        if r.choices[0].finish_reason == "stop":
            assert r.usage.completion_tokens < 400
    assert "stop" in finishes


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nope", messages=MESSAGES)
    body = e.value.body
    assert isinstance(body, dict)
    assert body["param"] == "model"
    assert "nope" in body["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (b'{"messages": [{"role": "user", "content": "hi"}]}', "model"),
        (b'{"model": "sim-llama"}', "messages"),
        (b'{"model": "sim-llama", "messages": "hi"}', "messages"),
        (
            b'{"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}], '
            b'"max_tokens": 0}',
            "max_tokens",
        ),
        (
            b'{"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}], '
            b'"max_tokens": "ten"}',
            "max_tokens",
        ),
        (
            b'{"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}], '
            b'"temperature": 7}',
            "temperature",
        ),
        (
            b'{"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}], '
            b'"max_tokens": 4090}',
            "max_tokens",
        ),
    ],
)
def test_bad_input_is_400_naming_the_field(
    cluster: Cluster, body: bytes, param: str | None
) -> None:
    status, payload, headers = post(cluster, "/v1/chat/completions", body)
    assert status == 400, payload
    assert payload["error"]["type"] == "invalid_request_error"
    assert payload["error"]["param"] == param
    assert payload["error"]["message"]
    assert headers.get("x-request-id")


def test_prompt_over_the_context_is_400(client: openai.OpenAI) -> None:
    long = "word " * 5000
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="sim-llama", messages=[{"role": "user", "content": long}], max_tokens=8
        )
    body = e.value.body
    assert isinstance(body, dict)
    assert body["param"] == "messages"
    assert "context" in body["message"]


def test_body_over_the_limit_is_413(cluster: Cluster) -> None:
    big = json.dumps(
        {"model": "sim-llama", "messages": [{"role": "user", "content": "x" * (2 << 20)}]}
    ).encode()
    status, payload, _ = post(cluster, "/v1/chat/completions", big)
    assert status == 413
    assert payload["error"]["message"]


def test_request_id_is_echoed(cluster: Cluster) -> None:
    req = urllib.request.Request(
        f"{cluster.http_url}/v1/completions",
        data=b'{"model": "sim-llama", "prompt": "hi", "max_tokens": 2}',
        headers={"Content-Type": "application/json", "x-request-id": "req-123"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["x-request-id"] == "req-123"
        assert resp.headers["x-shardgate-replica"] in cluster.sidecar_targets()
        body = json.loads(resp.read())
    assert body["id"].endswith("req-123")


def test_unknown_route_is_json_404(cluster: Cluster) -> None:
    status, payload, _ = post(cluster, "/v1/nothing", b"{}")
    assert status == 404
    assert payload["error"]["message"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"extra_body": {"include_stop_str_in_output": True}}, "include_stop_str_in_output"),
        ({"extra_body": {"skip_special_tokens": False}}, "skip_special_tokens"),
        ({"extra_body": {"prompt_logprobs": 1}}, "prompt_logprobs"),
        ({"extra_body": {"echo": True, "logprobs": True, "top_logprobs": 1}}, "prompt_logprobs"),
        ({"extra_body": {"truncate_prompt_tokens": 3}}, "truncate_prompt_tokens"),
        ({"extra_body": {"truncation_side": "left"}}, "truncation_side"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "f"}},
            },
            "tools",
        ),
    ],
)
def test_a_field_the_engine_cannot_honour_is_400_naming_it(
    client: openai.OpenAI, extra: dict[str, Any], param: str
) -> None:
    """The sim announces none of these: never answered as if they had not been asked. (The
    sampling fields it honours take effect: test_sim_sampling.py.)"""
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="sim-llama", messages=MESSAGES, max_tokens=4, **extra)
    body = e.value.body
    assert isinstance(body, dict)
    assert body["param"] == param
    assert body["message"] == f"model sim-llama: {param} is not supported by its engine."


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"tool_choice": "required"}, "tool_choice"),  # (and no tools)
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"extra_body": {"structured_outputs": {"choice": ["a"]}}}, "structured_outputs"),
    ],
)
def test_what_the_gateway_does_not_serve_is_400_naming_it(
    client: openai.OpenAI, extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="sim-llama", messages=MESSAGES, max_tokens=4, **extra)
    body = e.value.body
    assert isinstance(body, dict) and body["param"] == param


def test_a_prompt_of_token_ids_is_served(client: openai.OpenAI) -> None:
    out = client.completions.create(
        model="sim-llama",
        prompt=[11, 12, 13, 14, 15],
        max_tokens=4,
        extra_body={"ignore_eos": True},
    )
    assert out.usage is not None
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (5, 4)
    assert out.choices[0].text


def test_completions_echo_the_prompt_streamed_or_not(client: openai.OpenAI) -> None:
    args: dict[str, Any] = {
        "model": "sim-llama",
        "prompt": "Once upon a time",
        "max_tokens": 6,
        "temperature": 0.0,
        "extra_body": {"ignore_eos": True},
    }
    plain = client.completions.create(**args).choices[0].text
    echoed = client.completions.create(**args, echo=True)
    assert echoed.choices[0].text == "Once upon a time" + plain
    assert echoed.usage is not None and echoed.usage.completion_tokens == 6
    chunks = [c.choices[0].text for c in client.completions.create(**args, echo=True, stream=True)]
    assert chunks[0] == "Once upon a time" and "".join(chunks) == echoed.choices[0].text
