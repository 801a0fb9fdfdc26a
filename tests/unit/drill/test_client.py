"""Folding a streamed chat completion's SSE events into a record."""

from __future__ import annotations

import orjson

from drill.client import apply_event, body
from drill.requests import RequestRecord, RequestSpec


def chunk(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    return orjson.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def fold(*events: bytes) -> tuple[RequestRecord, str]:
    r = RequestRecord(index=0, started=0.0)
    pieces: list[str] = []
    for e in events:
        apply_event(r, e, pieces)
    return r, "".join(pieces)


def test_a_whole_stream() -> None:
    usage = orjson.dumps({"choices": [], "usage": {"completion_tokens": 2}})
    r, text = fold(chunk(""), chunk("He"), chunk("llo", "length"), usage, b"[DONE]")
    assert text == "Hello"
    assert (r.finish_reason, r.completion_tokens, r.done, r.error) == ("length", 2, True, None)


def test_an_error_event_is_kept_and_the_first_error_wins() -> None:
    err = orjson.dumps({"error": {"message": "no replica left", "code": 503}})
    r, _ = fold(chunk("a"), err, b"not json", b"[DONE]")
    assert r.error == "error event: no replica left"
    assert r.done


def test_anything_after_done_is_an_error() -> None:
    r, text = fold(chunk("a"), b"[DONE]", chunk("b"))
    assert r.error == "data after [DONE]"
    assert text == "a"


def test_a_chunk_that_is_no_json_object_is_an_error() -> None:
    assert fold(b"{broken")[0].error == "a chunk that is no JSON"
    assert fold(b"[1, 2]")[0].error == "a chunk that is no JSON object"


def test_the_request_body_streams_greedily_to_the_length() -> None:
    data = orjson.loads(body(RequestSpec(3, "Hi", 250), "sim-llama"))
    assert data["max_tokens"] == 250
    assert data["ignore_eos"] is True
    assert data["stream"] is True
    assert data["stream_options"] == {"include_usage": True}
    assert data["temperature"] == 0
    assert data["messages"] == [{"role": "user", "content": "Hi"}]
