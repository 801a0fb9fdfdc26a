"""Lost and corrupted: how a drill judges each request against its reference run."""

from __future__ import annotations

from typing import Any

import pytest

from drill.classify import Verdict, classify, tally
from drill.requests import RequestRecord, RequestSpec

SPEC = RequestSpec(0, "Hello", 5)
REF = "a b c d e"


def record(**kw: Any) -> RequestRecord:
    base: dict[str, Any] = {
        "index": 0,
        "started": 1.0,
        "ended": 2.0,
        "status": 200,
        "replica": "127.0.0.1:1",
        "text": REF,
        "completion_tokens": 5,
        "finish_reason": "length",
        "done": True,
    }
    return RequestRecord(**{**base, **kw})


def test_a_whole_stream_with_the_reference_text_is_ok() -> None:
    assert classify(record(), SPEC, REF) == (Verdict.OK, "")


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"error": "error event: no replica left"}, "error: error event: no replica left"),
        ({"status": 503, "done": False}, "http 503"),
        ({"done": False}, "stream ended without [DONE]"),
        ({"finish_reason": "stop"}, "finish_reason 'stop', expected 'length'"),
        ({"finish_reason": None}, "finish_reason None, expected 'length'"),
        ({"completion_tokens": 4, "text": "a b c d"}, "4 tokens of 5"),
        ({"completion_tokens": 6}, "6 tokens of 5"),
        ({"completion_tokens": None}, "None tokens of 5"),
    ],
)
def test_errors_and_missing_or_extra_tokens_are_lost(kw: dict[str, Any], why: str) -> None:
    assert classify(record(**kw), SPEC, REF) == (Verdict.LOST, why)


def test_an_error_wins_over_a_whole_looking_stream() -> None:
    verdict, why = classify(record(error="data after [DONE]"), SPEC, REF)
    assert verdict is Verdict.LOST and why == "error: data after [DONE]"


def test_a_whole_stream_with_other_text_is_corrupted() -> None:
    verdict, why = classify(record(text="a b X d e"), SPEC, REF)
    assert verdict is Verdict.CORRUPTED
    assert "character 4" in why


def test_a_repeated_piece_is_corrupted_even_with_the_right_token_count() -> None:
    verdict, why = classify(record(text="a b c d e e"), SPEC, REF)
    assert verdict is Verdict.CORRUPTED
    assert "lengths 11 and 9" in why


def test_tally_counts_each_verdict_and_groups_alike_reasons() -> None:
    specs = {0: SPEC, 1: RequestSpec(1, "Other", 3)}
    refs = {0: REF, 1: "x y z"}
    records = [
        record(),
        record(index=1, text="x y z", completion_tokens=3),
        record(completion_tokens=3),
        record(completion_tokens=2),
        record(text="nope"),
        record(error="no end within 60 s"),
    ]
    t = tally(records, specs, refs, max_examples=2)
    assert (t.sent, t.completed, t.lost, t.corrupted) == (6, 2, 3, 1)
    assert t.reasons["N tokens of N"] == 2
    assert t.reasons["error: no end within N s"] == 1
    assert sum(t.reasons.values()) == 4
    assert t.examples == [
        "request 0 on 127.0.0.1:1: 3 tokens of 5",
        "request 0 on 127.0.0.1:1: 2 tokens of 5",
    ]


def test_tally_of_nothing_is_zero() -> None:
    t = tally([], {}, {})
    assert (t.sent, t.completed, t.lost, t.corrupted, t.examples) == (0, 0, 0, 0, [])
