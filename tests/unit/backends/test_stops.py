"""Stop strings over streamed text: a pure table, and resuming with the text so far."""

from __future__ import annotations

import pytest

from engine_sidecar.backends.common.stops import StopStrings

CASES = [
    # stops, pieces fed, expected (emitted per piece), stopped at the last piece
    ((), ["ab", "cd"], ["ab", "cd"], False),
    (("xyz",), ["ab", "cd", "ef"], ["", "ab", "cd"], False),
    (("xyz",), ["abx", "y", "z!"], ["a", "b", ""], True),
    (("cd",), ["abc", "def"], ["ab", ""], True),
    (("bcd", "c"), ["abcd"], ["ab"], True),  # "c" completes first
    (("abc", "bc"), ["a", "b", "c"], ["", "", ""], True),  # "bc" starts later, ends with "abc"
    (("", "q"), ["ab"], ["ab"], False),  # empty stop strings are ignored
]

# include_stop_str_in_output: nothing held back, the stop string emitted, the search still
# across pieces.
INCLUDE_CASES = [
    (("xyz",), ["ab", "cd", "ef"], ["ab", "cd", "ef"], False),
    (("xyz",), ["abx", "y", "z!"], ["abx", "y", "z"], True),
    (("cd",), ["abc", "def"], ["abc", "d"], True),
    (("bcd", "c"), ["abcd"], ["abc"], True),
]


@pytest.mark.parametrize(("stops", "pieces", "emitted", "stopped"), INCLUDE_CASES)
def test_stop_strings_included(
    stops: tuple[str, ...], pieces: list[str], emitted: list[str], stopped: bool
) -> None:
    m = StopStrings(stops, include=True)
    out = [m.feed(p) for p in pieces]
    assert [text for text, _ in out] == emitted
    assert [s for _, s in out] == [False] * (len(pieces) - 1) + [stopped]
    assert m.flush() == ""


def test_a_stop_string_within_min_tokens_never_stops_it_later() -> None:
    """("a" completed while min_tokens held the search off: vLLM never stops on it.)"""
    for include in (False, True):
        m = StopStrings(("a", "bbbbb"), include=include)
        out = [m.feed("a", search=False), m.feed("x", search=False), m.feed("y"), m.feed("z")]
        assert not any(stopped for _, stopped in out)
        assert "".join(t for t, _ in out) + m.flush() == "axyz"


def test_without_search_no_stop_string_completes() -> None:
    m = StopStrings(("cd",))
    assert m.feed("abc", search=False) == ("ab", False)
    assert m.feed("d", search=False) == ("c", False)  # (it completed within min_tokens)
    assert m.feed("cd") == ("d", True)


@pytest.mark.parametrize(("stops", "pieces", "emitted", "stopped"), CASES)
def test_stop_strings(
    stops: tuple[str, ...], pieces: list[str], emitted: list[str], stopped: bool
) -> None:
    m = StopStrings(stops)
    out = [m.feed(p) for p in pieces]
    assert [text for text, _ in out] == emitted
    assert [s for _, s in out] == [False] * (len(pieces) - 1) + [stopped]


def test_flush_gives_what_was_held_back() -> None:
    m = StopStrings(("xyz",))
    assert m.feed("abcd") == ("ab", False)
    assert m.flush() == "cd"
    assert m.flush() == ""


@pytest.mark.parametrize("stops", [("xyz",), ("ll", "low"), ("e",)])
def test_a_matcher_primed_with_the_text_so_far_continues_it(stops: tuple[str, ...]) -> None:
    pieces = ["He", "l", "lo", " wor", "ld", " and", " low", " xyz", " end"]
    whole = StopStrings(stops)
    out = [whole.feed(p) for p in pieces]
    end = next((i for i, (_, s) in enumerate(out) if s), len(pieces) - 1)
    expected = "".join(t for t, _ in out[: end + 1]) + ("" if out[end][1] else whole.flush())
    for cut in range(end + 1):
        sent = "".join(t for t, _ in out[:cut])
        m = StopStrings(stops, "".join(pieces[:cut]))
        rest = [m.feed(p) for p in pieces[cut : end + 1]]
        tail = "" if rest[-1][1] else m.flush()
        assert sent + "".join(t for t, _ in rest) + tail == expected, cut
        assert rest[-1][1] == out[end][1]


@pytest.mark.parametrize(
    ("stops", "pieces", "matched"),
    [
        (("xyz",), ["ab", "cd"], ""),
        (("xyz",), ["abx", "y", "z!"], "xyz"),
        (("bcd", "c"), ["abcd"], "c"),  # the one that completes first
        (("abc", "bc"), ["a", "b", "c"], "abc"),  # both end there: the text is cut at "abc"
    ],
)
def test_the_stop_string_that_ended_it_is_named(
    stops: tuple[str, ...], pieces: list[str], matched: str
) -> None:
    m = StopStrings(stops)
    for p in pieces:
        m.feed(p)
    assert m.matched == matched
