"""Encoding of OpenAI responses and SSE events (gateway.api.openai.encode)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2
import openai
import pytest
from openai.types import Completion, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from gateway.api.openai.encode import (
    DONE,
    SYSTEM_FINGERPRINT,
    Choice,
    ChunkEncoder,
    Last,
    encode_chat_completion,
    encode_completion,
    error_body,
)
from gateway.api.openai.models_body import encode_model, encode_models
from gateway.types import (
    GatewayError,
    InvalidRequest,
    ModelNotFound,
    RateLimited,
    Unavailable,
    Usage,
)

RID = "0f1e2d3c"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CREATED = 1_732_900_000
USAGE = Usage(prompt_tokens=11, completion_tokens=5, cached_tokens=8)
USAGE_JSON = {
    "prompt_tokens": 11,
    "completion_tokens": 5,
    "total_tokens": 16,
    "prompt_tokens_details": {"cached_tokens": 8},
}

# A stream's usage as `vllm serve` streams it (its order; no prompt_tokens_details).
STREAM_USAGE_JSON = {"prompt_tokens": 11, "total_tokens": 16, "completion_tokens": 5}
FP = SYSTEM_FINGERPRINT

# Chunks as `vllm serve` (0.32) writes them, field for field.
CHUNK_KEYS = ["id", "object", "created", "model", "choices"]
CHOICE_KEYS_CHAT = ["index", "delta", "logprobs", "finish_reason", "token_ids"]
CHOICE_KEYS_COMPLETION = [
    "index",
    "text",
    "logprobs",
    "finish_reason",
    "stop_reason",
    "prompt_token_ids",
    "token_ids",
]

# Texts that stress JSON escaping and SSE framing.
TRICKY_TEXTS = [
    "",
    " hello",
    'say "hi"',
    "back\\slash",
    "line\nbreak\r\n",
    "tab\tand\x00nul\x1fctl\x7f",
    "héllo wörld — ünïcödé",
    "emoji 👋🏽 and CJK 你好",
    "\u2028\u2029 separators",
    "</script><script>",
    "data: [DONE]\n\n",
    "x" * 10_000,
]


def events(data: bytes | bytearray) -> list[bytes]:
    """Split SSE bytes into the payloads of their `data:` events, checking the framing."""
    data = bytes(data)
    assert data.endswith(b"\n\n")
    out = []
    for event in data[:-2].split(b"\n\n"):
        assert event.startswith(b"data: ")
        assert b"\n" not in event and b"\r" not in event
        out.append(event[len(b"data: ") :])
    return out


def one_event(data: bytes | bytearray) -> dict[str, Any]:
    (payload,) = events(data)
    obj = json.loads(payload)
    assert isinstance(obj, dict)
    return obj


# --- streaming chat ----------------------------------------------------------------------------


def test_chat_role_chunk() -> None:
    raw = ChunkEncoder(RID, MODEL, CREATED, "chat").role_chunk()
    assert one_event(raw) == {
        "id": f"chatcmpl-{RID}",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
        "prompt_token_ids": None,
        "prompt_text": None,
    }
    chunk = ChatCompletionChunk.model_validate_json(events(raw)[0])
    assert chunk.choices[0].delta.role == "assistant"


@pytest.mark.parametrize("text", TRICKY_TEXTS)
def test_chat_token_chunk(text: str) -> None:
    enc = ChunkEncoder(RID, MODEL, CREATED, "chat")
    buf = bytearray()
    enc.token_chunk_into(buf, text)
    obj = one_event(buf)
    assert list(obj) == CHUNK_KEYS
    assert list(obj["choices"][0]) == CHOICE_KEYS_CHAT
    assert obj == {
        "id": f"chatcmpl-{RID}",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "delta": {"content": text},
                "logprobs": None,
                "finish_reason": None,
                "token_ids": None,
            }
        ],
    }
    chunk = ChatCompletionChunk.model_validate_json(events(buf)[0])
    assert chunk.choices[0].delta.content == text


def test_token_chunk_appends() -> None:
    enc = ChunkEncoder(RID, MODEL, CREATED, "chat")
    buf = bytearray(enc.role_chunk())
    for t in ["a", "b", "c"]:
        enc.token_chunk_into(buf, t)
    payloads = [json.loads(p) for p in events(buf)]
    assert [p["choices"][0]["delta"] for p in payloads] == [
        {"role": "assistant", "content": ""},
        {"content": "a"},
        {"content": "b"},
        {"content": "c"},
    ]


def test_token_chunk_with_lone_surrogate_is_replaced() -> None:
    enc = ChunkEncoder(RID, MODEL, CREATED, "chat")
    buf = bytearray(b"data: [DONE]\n\n")
    enc.token_chunk_into(buf, "a\ud800b")
    assert json.loads(events(buf)[1])["choices"][0]["delta"]["content"] == "a\ufffdb"


def test_identity_is_escaped() -> None:
    enc = ChunkEncoder('id"\n', 'model"\n\\', 7, "chat")
    buf = bytearray()
    enc.token_chunk_into(buf, "x")
    obj = one_event(buf)
    assert (obj["id"], obj["model"]) == ('chatcmpl-id"\n', 'model"\n\\')


@pytest.mark.parametrize("reason", ["stop", "length"])
def test_chat_finish_chunk(reason: str) -> None:
    buf = bytearray()
    ChunkEncoder(RID, MODEL, CREATED, "chat").finish_chunk_into(buf, reason)
    obj = one_event(buf)
    assert list(obj) == [*CHUNK_KEYS, "system_fingerprint"]
    assert obj["choices"] == [
        {
            "index": 0,
            "delta": {},
            "logprobs": None,
            "finish_reason": reason,
            "stop_reason": None,
            "token_ids": None,
        }
    ]
    assert obj["system_fingerprint"] == FP
    chunk = ChatCompletionChunk.model_validate_json(events(buf)[0])
    assert chunk.choices[0].finish_reason == reason


def test_chat_usage_chunk() -> None:
    buf = bytearray()
    ChunkEncoder(RID, MODEL, CREATED, "chat").usage_chunk_into(buf, USAGE)
    assert one_event(buf) == {
        "id": f"chatcmpl-{RID}",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "choices": [],
        "usage": STREAM_USAGE_JSON,
        "system_fingerprint": FP,
    }
    chunk = ChatCompletionChunk.model_validate_json(events(buf)[0])
    assert chunk.usage is not None
    assert chunk.usage.total_tokens == 16


# --- streaming completions ---------------------------------------------------------------------


def test_completion_has_no_role_chunk() -> None:
    assert ChunkEncoder(RID, MODEL, CREATED, "completion").role_chunk() == b""


@pytest.mark.parametrize("text", TRICKY_TEXTS)
def test_completion_token_chunk(text: str) -> None:
    buf = bytearray()
    ChunkEncoder(RID, MODEL, CREATED, "completion").token_chunk_into(buf, text)
    obj = one_event(buf)
    assert list(obj) == CHUNK_KEYS
    assert list(obj["choices"][0]) == CHOICE_KEYS_COMPLETION
    assert obj == {
        "id": f"cmpl-{RID}",
        "object": "text_completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": None,
                "stop_reason": None,
                "prompt_token_ids": None,
                "token_ids": None,
            }
        ],
    }


@pytest.mark.parametrize("reason", ["stop", "length"])
def test_completion_finish_chunk(reason: str) -> None:
    buf = bytearray()
    ChunkEncoder(RID, MODEL, CREATED, "completion").finish_chunk_into(buf, reason)
    obj = one_event(buf)
    assert list(obj) == [*CHUNK_KEYS, "system_fingerprint"]
    assert obj["choices"] == [
        {
            "index": 0,
            "text": "",
            "logprobs": None,
            "finish_reason": reason,
            "stop_reason": None,
            "prompt_token_ids": None,
            "token_ids": None,
        }
    ]
    # A finished chunk is a valid `Completion` (unfinished ones have finish_reason null,
    # which the SDK's Completion type does not allow, though its stream reader does).
    assert Completion.model_validate_json(events(buf)[0]).choices[0].finish_reason == reason


def test_completion_usage_chunk() -> None:
    buf = bytearray()
    ChunkEncoder(RID, MODEL, CREATED, "completion").usage_chunk_into(buf, USAGE)
    assert one_event(buf) == {
        "id": f"cmpl-{RID}",
        "object": "text_completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [],
        "usage": STREAM_USAGE_JSON,
        "system_fingerprint": FP,
    }
    usage = Completion.model_validate_json(events(buf)[0]).usage
    assert usage is not None and usage.total_tokens == 16


def test_the_fingerprint_names_the_gateway_s_version() -> None:
    assert SYSTEM_FINGERPRINT.startswith("shardgate-")


def test_unknown_kind() -> None:
    with pytest.raises(ValueError):
        ChunkEncoder(RID, MODEL, CREATED, "embedding")  # type: ignore[arg-type]


def test_error_event_and_done() -> None:
    raw = ChunkEncoder.error_event("engine went away", "upstream_error", 502)
    assert one_event(raw) == {
        "error": {
            "message": "engine went away",
            "type": "upstream_error",
            "param": None,
            "code": 502,
        }
    }
    assert ChunkEncoder(RID, MODEL, CREATED, "chat").error_event("m", "t", 500).startswith(b"data:")
    assert DONE == b"data: [DONE]\n\n"


# --- the SDK's own stream reader ---------------------------------------------------------------


def _client(body: bytes, content_type: str, status: int = 200) -> openai.OpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, content=body, headers={"content-type": content_type})

    return openai.OpenAI(
        base_url="http://gateway.invalid/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def _stream(kind: str, texts: list[str], error: bool = False) -> bytes:
    enc = ChunkEncoder(RID, MODEL, CREATED, "chat" if kind == "chat" else "completion")
    buf = bytearray(enc.role_chunk())
    for t in texts:
        enc.token_chunk_into(buf, t)
    if error:
        buf += enc.error_event("engine went away", "upstream_error", 502)
    else:
        enc.finish_chunk_into(buf, "length")
        enc.usage_chunk_into(buf, USAGE)
    buf += DONE
    return bytes(buf)


def test_sdk_reads_chat_stream() -> None:
    texts = ["Hel", "lo", ", ", "wörld\n", '"!"']
    client = _client(_stream("chat", texts), "text/event-stream")
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "".join(texts)
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    assert {c.id for c in chunks} == {f"chatcmpl-{RID}"}


def test_sdk_reads_completion_stream() -> None:
    texts = ["Once", " upon", " a time"]
    client = _client(_stream("completion", texts), "text/event-stream")
    chunks = list(client.completions.create(model=MODEL, prompt="x", stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "".join(texts)
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 11


def test_sdk_raises_on_error_event() -> None:
    client = _client(_stream("chat", ["a"], error=True), "text/event-stream")
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    with pytest.raises(openai.APIError, match="engine went away"):
        list(stream)


# --- non-streaming -----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "Hello!", 'multi\nline "quoted" 👋'])
def test_chat_completion(text: str) -> None:
    raw = encode_chat_completion(RID, MODEL, CREATED, [Choice(text, "stop")], USAGE)
    assert json.loads(raw) == {
        "id": f"chatcmpl-{RID}",
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": USAGE_JSON,
    }
    parsed = ChatCompletion.model_validate_json(raw)
    assert parsed.choices[0].message.content == text
    assert parsed.usage is not None and parsed.usage.total_tokens == 16


@pytest.mark.parametrize("text", ["", "Hello!", 'multi\nline "quoted" 👋'])
def test_completion(text: str) -> None:
    raw = encode_completion(RID, MODEL, CREATED, [Choice(text, "length")], USAGE)
    assert json.loads(raw) == {
        "id": f"cmpl-{RID}",
        "object": "text_completion",
        "created": CREATED,
        "model": MODEL,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}],
        "usage": USAGE_JSON,
    }
    parsed = Completion.model_validate_json(raw)
    assert parsed.choices[0].text == text
    assert parsed.choices[0].finish_reason == "length"


def test_sdk_reads_non_streaming_bodies() -> None:
    client = _client(
        encode_chat_completion(RID, MODEL, CREATED, [Choice("hi", "stop")], USAGE),
        "application/json",
    )
    resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    assert resp.choices[0].message.content == "hi"
    client = _client(
        encode_completion(RID, MODEL, CREATED, [Choice("yo", "stop")], USAGE), "application/json"
    )
    assert client.completions.create(model=MODEL, prompt="x").choices[0].text == "yo"


# --- models ------------------------------------------------------------------------------------


def test_models() -> None:
    raw = encode_models([("a", 4096, None), ("b/c", 131072, "a")], CREATED)
    assert json.loads(raw) == {
        "object": "list",
        "data": [
            {
                "id": "a",
                "object": "model",
                "created": CREATED,
                "owned_by": "shardgate",
                "parent": None,
                "max_model_len": 4096,
            },
            {
                "id": "b/c",
                "object": "model",
                "created": CREATED,
                "owned_by": "shardgate",
                "parent": "a",  # a LoRA adapter of model a
                "max_model_len": 131072,
            },
        ],
    }
    for entry in json.loads(raw)["data"]:
        Model.model_validate_json(json.dumps(entry))
    client = _client(raw, "application/json")
    assert [m.id for m in client.models.list()] == ["a", "b/c"]


def test_models_empty() -> None:
    assert json.loads(encode_models([], CREATED)) == {"object": "list", "data": []}


def test_model() -> None:
    raw = encode_model(("a", 2048, None), CREATED)
    model = Model.model_validate_json(raw)
    assert (model.id, model.object, model.created, model.owned_by) == (
        "a",
        "model",
        CREATED,
        "shardgate",
    )
    assert json.loads(raw)["max_model_len"] == 2048


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "status", "type_", "param"),
    [
        (
            lambda: InvalidRequest("bad max_tokens", "max_tokens"),
            400,
            "invalid_request_error",
            "max_tokens",
        ),
        (lambda: ModelNotFound("no such model"), 404, "not_found_error", None),
        (lambda: RateLimited("slow down"), 429, "rate_limit_error", None),
        (lambda: Unavailable("no replica"), 503, "service_unavailable", None),
        (lambda: GatewayError("boom"), 500, "internal_error", None),
    ],
)
def test_error_body(
    make: Callable[[], GatewayError], status: int, type_: str, param: str | None
) -> None:
    err = make()
    raw = error_body(err)
    assert json.loads(raw) == {
        "error": {"message": err.message, "type": type_, "param": param, "code": status}
    }
    client = _client(raw, "application/json", status=status)
    with pytest.raises(openai.APIStatusError) as info:
        client.models.list()
    assert info.value.status_code == status
    assert info.value.message.endswith(err.message)
    assert info.value.param == param
    assert info.value.type == type_


def test_the_final_step_goes_in_the_finish_event_as_vllm_sends_it() -> None:
    chat = ChunkEncoder(RID, MODEL, CREATED, "chat")
    buf = bytearray()
    chat.finish_chunk_into(buf, "stop", Last(text="ok", stop_reason="\n"), fingerprint=False)
    obj = one_event(buf)
    assert list(obj) == CHUNK_KEYS  # (a usage event follows: it has the fingerprint)
    assert obj["choices"][0]["delta"] == {"content": "ok"}
    assert (obj["choices"][0]["finish_reason"], obj["choices"][0]["stop_reason"]) == ("stop", "\n")
    buf.clear()
    chat.finish_chunk_into(buf, "tool_calls", Last(delta={"tool_calls": []}, parsed=True))
    assert one_event(buf)["choices"][0]["delta"] == {"tool_calls": []}
    buf.clear()
    chat.finish_chunk_into(buf, "stop", Last(parsed=True))  # (the step showed nothing)
    assert one_event(buf)["choices"][0]["delta"] == {}
    buf.clear()
    ChunkEncoder(RID, MODEL, CREATED, "completion").finish_chunk_into(buf, "length", Last("end"))
    assert one_event(buf)["choices"][0]["text"] == "end"
