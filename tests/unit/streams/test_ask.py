"""Whether a stream is kept (gateway/streams/ask.py): the request's word, then its tenant's,
then its route's."""

from __future__ import annotations

import pytest

from gateway.streams.ask import CHAT, COMPLETIONS, GENERATE, ROUTES, kept, parse_asked
from gateway.types import InvalidRequest


@pytest.mark.parametrize(
    ("value", "asked"),
    [
        (None, None),
        ("true", True),
        ("TRUE", True),
        (" yes ", True),
        ("1", True),
        ("on", True),
        ("false", False),
        ("0", False),
        ("No", False),
        ("off", False),
    ],
)
def test_the_header_s_word(value: str | None, asked: bool | None) -> None:
    assert parse_asked(value) is asked


@pytest.mark.parametrize("value", ["", "maybe", "2", "truee", "x" * 1000])
def test_any_other_word_is_a_400_naming_the_header(value: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        parse_asked(value)
    assert e.value.param == "x-shardgate-resumable"
    assert "x-shardgate-resumable must be true or false" in e.value.message
    assert len(e.value.message) < 100  # (a long value is cut)


@pytest.mark.parametrize(
    ("asked", "tenant", "route", "routes", "expected"),
    [
        # nobody says anything: not kept (a default stream is what vllm serve sends)
        (None, None, CHAT, (), False),
        # the route list
        (None, None, CHAT, (CHAT,), True),
        (None, None, COMPLETIONS, (CHAT,), False),
        (None, None, GENERATE, ROUTES, True),
        # the tenant over the route list
        (None, True, CHAT, (), True),
        (None, False, CHAT, (CHAT,), False),
        # the request over both
        (True, False, CHAT, (), True),
        (False, True, CHAT, (CHAT,), False),
        (True, None, COMPLETIONS, (), True),
    ],
)
def test_the_request_then_the_tenant_then_the_route(
    asked: bool | None, tenant: bool | None, route: str, routes: tuple[str, ...], expected: bool
) -> None:
    assert kept(asked, tenant, route, routes) is expected


def test_the_routes_a_config_may_list() -> None:
    assert set(ROUTES) == {CHAT, COMPLETIONS, GENERATE}
