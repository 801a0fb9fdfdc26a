"""vLLM's return_token_ids in the OpenAI answers (gateway.api.openai.token_ids): the ids go
into the chunks and bodies the encoders wrote, which stay valid JSON and otherwise unchanged."""

from __future__ import annotations

import json

from gateway.api.openai import encode
from gateway.api.openai.protocol import decode_chat, decode_completion
from gateway.api.openai.token_ids import StreamIds, body_with, role_chunk_with
from gateway.types import Usage


def _events(buf: bytes) -> list[dict[str, object]]:
    return [json.loads(e.removeprefix(b"data: ")) for e in buf.split(b"\n\n") if e]


def test_a_chat_stream_carries_prompt_ids_first_and_each_chunk_s_ids() -> None:
    enc = encode.ChunkEncoder("r", "m", 1, "chat")
    ids = StreamIds("chat", [1, 2])
    buf = bytearray(role_chunk_with(enc.role_chunk(), [1, 2]))
    enc.token_chunk_into(buf, "Hi")
    ids.add(buf, [7])
    enc.delta_chunk_into(buf, {"content": " there"})
    ids.held += [8]  # a token with nothing to show yet
    ids.add(buf, [9])
    enc.finish_chunk_into(buf, "stop")
    ids.add(buf, [])
    role, tok, delta, finish = _events(bytes(buf))
    assert role["prompt_token_ids"] == [1, 2]
    assert role["choices"] == [
        {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
    ]
    assert [e["choices"][0]["token_ids"] for e in (tok, delta, finish)] == [[7], [8, 9], []]  # type: ignore[index]
    assert "prompt_token_ids" not in tok and "prompt_token_ids" not in tok["choices"][0]  # type: ignore[index]


def test_a_completion_stream_carries_the_prompt_ids_in_its_first_choice_chunk() -> None:
    enc = encode.ChunkEncoder("r", "m", 1, "completion", index=1)
    ids = StreamIds("completion", [1, 2])
    buf = bytearray()
    for t, text in ((5, "a"), (6, "b")):
        enc.token_chunk_into(buf, text)
        ids.add(buf, [t])
    first, second = (e["choices"][0] for e in _events(bytes(buf)))  # type: ignore[index]
    assert first == {
        "index": 1,
        "text": "a",
        "logprobs": None,
        "finish_reason": None,
        "stop_reason": None,
        "prompt_token_ids": [1, 2],
        "token_ids": [5],
    }
    assert second["token_ids"] == [6] and second["prompt_token_ids"] is None


def test_whole_answers_carry_the_ids_where_vllm_puts_them() -> None:
    choices = [encode.Choice("a", "stop"), encode.Choice("b", "length")]
    chat = json.loads(
        body_with(
            encode.encode_chat_completion("r", "m", 1, choices, Usage(2, 2)),
            True,
            [[1, 2], [1, 2]],
            [[5], [6]],
        )
    )
    assert chat["prompt_token_ids"] == [1, 2]
    assert [c["token_ids"] for c in chat["choices"]] == [[5], [6]]
    assert "prompt_token_ids" not in chat["choices"][0]
    text = json.loads(
        body_with(
            encode.encode_completion("r", "m", 1, choices, Usage(2, 2)),
            False,
            [[1, 2], [3]],
            [[5], [6]],
        )
    )
    assert "prompt_token_ids" not in text
    assert [(c["prompt_token_ids"], c["token_ids"]) for c in text["choices"]] == [
        ([1, 2], [5]),
        ([3], [6]),
    ]


def test_return_token_ids_is_decoded_and_echoes_no_prompt_text() -> None:
    body = (
        b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "return_token_ids": true}'
    )
    assert decode_chat(body, "r").return_token_ids
    assert not decode_chat(body.replace(b"true", b"false"), "r").return_token_ids
    req = decode_completion(
        b'{"model": "m", "prompt": "p", "echo": true, "return_token_ids": true}', "r"
    )
    assert req.return_token_ids and not req.echo
