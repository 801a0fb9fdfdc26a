"""The SSE verifier: each malformed, missing or truncated stream is counted as its kind."""

from __future__ import annotations

import math

import pytest

from bench import result as kinds
from bench.sse import SseVerifier
from gateway.types import Usage
from tests.bench.streams import events

OK_HEAD = {"content-type": "text/event-stream"}


def verify(
    body: bytes,
    *,
    expect: int | None = 8,
    complete: bool = True,
    kind: str = "chat",
    status: int = 200,
    headers: dict[str, str] | None = None,
    piece: int = 0,
) -> tuple[list[str], SseVerifier]:
    v = SseVerifier(kind, expect, start=100.0)  # type: ignore[arg-type]
    v.head(status, OK_HEAD if headers is None else headers)
    if piece:
        for i in range(0, len(body), piece):
            v.feed(body[i : i + piece], 100.0 + i / 1000)
    else:
        v.feed(body, 101.0)
    return v.finish(complete), v


@pytest.mark.parametrize("kind", ["chat", "completions"])
def test_a_correct_stream_has_no_errors_and_counts_every_token(kind: str) -> None:
    body = b"".join(events(8, kind="chat" if kind == "chat" else "completion"))
    errors, v = verify(body, kind=kind)
    assert errors == []
    assert v.tokens == 8
    assert v.prompt_tokens == 12
    assert v.finish_reason == "length"


@pytest.mark.parametrize("piece", [1, 2, 7, 64])
def test_any_split_into_reads_gives_the_same_result(piece: int) -> None:
    errors, v = verify(b"".join(events(8)), piece=piece)
    assert errors == []
    assert v.tokens == 8


def test_timings_come_from_the_reads_that_carried_the_tokens() -> None:
    evs = events(3)
    v = SseVerifier("chat", 3, start=10.0)
    v.head(200, OK_HEAD)
    v.feed(evs[0], 10.5)  # role chunk: not a token
    v.feed(evs[1], 11.0)
    v.feed(evs[2] + evs[3], 11.5)
    v.feed(b"".join(evs[4:]), 12.0)
    assert v.finish(True) == []
    assert math.isclose(v.clock.first - v.clock.start, 1.0)
    assert list(v.clock.itls) == [0.5, 0.0]


def test_cut_off_mid_stream_is_truncated_only() -> None:
    body = b"".join(events(8))
    errors, _ = verify(body[: len(body) // 2], complete=False)
    assert errors == [kinds.TRUNCATED]


def test_no_done_terminator() -> None:
    errors, _ = verify(b"".join(events(8)[:-1]))
    assert errors == [kinds.MISSING_DONE]


def test_no_usage_chunk() -> None:
    evs = events(8)
    errors, _ = verify(b"".join(evs[:-2] + evs[-1:]))
    assert errors == [kinds.MISSING_USAGE]


def test_no_finish_reason() -> None:
    evs = events(8)
    errors, _ = verify(b"".join(evs[:-3] + evs[-2:]))
    assert errors == [kinds.MISSING_FINISH]


def test_a_chunk_that_does_not_parse() -> None:
    evs = events(8)
    evs.insert(3, b'data: {"id": "x", "choices": [\n\n')
    errors, _ = verify(b"".join(evs))
    assert errors == [kinds.BAD_JSON]


def test_a_chunk_without_choices_is_bad_json() -> None:
    evs = events(8)
    evs.insert(3, b'data: {"id": "x"}\n\n')
    errors, _ = verify(b"".join(evs))
    assert errors == [kinds.BAD_JSON]


def test_a_line_that_is_not_an_sse_field() -> None:
    evs = events(8)
    evs.insert(2, b"garbage\n\n")
    errors, _ = verify(b"".join(evs))
    assert errors == [kinds.SSE_FRAMING]


def test_comments_and_other_fields_are_allowed() -> None:
    evs = events(8)
    evs.insert(2, b": keep-alive\n\n")
    evs.insert(4, b"event: message\n" + evs.pop(4))
    errors, v = verify(b"".join(evs))
    assert errors == []
    assert v.tokens == 8


def test_anything_after_done_is_a_framing_error() -> None:
    evs = events(8)
    errors, _ = verify(b"".join([*evs, evs[1]]))
    assert errors == [kinds.SSE_FRAMING]


def test_an_unterminated_last_event() -> None:
    errors, _ = verify(b"".join(events(8)) + b"data: {")
    assert errors == [kinds.SSE_FRAMING]


def test_usage_that_does_not_add_up() -> None:
    errors, _ = verify(b"".join(events(8, total=99)))
    assert errors == [kinds.USAGE_SUM]


def test_more_chunks_than_completion_tokens() -> None:
    evs = events(8, usage=Usage(prompt_tokens=12, completion_tokens=7))
    errors, v = verify(b"".join(evs), expect=None)
    assert errors == [kinds.TOKEN_COUNT]
    assert v.detail == "token_count: 8 chunks, 7 in usage"


def test_ignore_eos_but_fewer_tokens_than_max_tokens() -> None:
    errors, _ = verify(b"".join(events(5)), expect=8)
    assert errors == [kinds.MAX_TOKENS]
    errors, _ = verify(b"".join(events(5)), expect=None)
    assert errors == []


def test_an_error_event_mid_stream() -> None:
    evs = events(8)[:4]
    evs.append(b'data: {"error": {"message": "engine died", "code": 503}}\n\n')
    evs.append(b"data: [DONE]\n\n")
    errors, v = verify(b"".join(evs))
    assert errors == [kinds.ERROR_EVENT]
    assert v.detail == "error_event: engine died"


def test_an_http_error_status() -> None:
    errors, v = verify(b'{"error": {"message": "no"}}', status=503, headers={"retry-after": "1"})
    assert errors == ["http_503"]
    assert v.detail == 'http_503: {"error": {"message": "no"}}'


def test_a_refusal_without_retry_after_is_its_own_kind() -> None:
    errors, _ = verify(b'{"error": {"message": "no"}}', status=429)
    assert errors == ["http_429" + kinds.NO_RETRY_AFTER]


def test_a_body_that_is_not_an_event_stream() -> None:
    errors, _ = verify(b"{}", headers={"content-type": "application/json"})
    assert errors == [kinds.CONTENT_TYPE]
