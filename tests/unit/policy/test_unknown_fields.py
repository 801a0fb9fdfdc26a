"""The unknown-fields policy: which keys are unknown, whose mode rules, and what the header,
the log line and the refusals say (bounded, and safe to write in a header)."""

from __future__ import annotations

import logging

import pytest

from gateway.config.loader import ConfigError, parse
from gateway.config.tenants import UnknownFieldsMode
from gateway.policy.tenants import Tenant, Tenants
from gateway.policy.unknown_fields import (
    MAX_LISTED,
    MAX_NAME_CHARS,
    Style,
    admit,
    header_value,
    mode_of,
    refusal,
    unknown_of,
)
from gateway.types import InvalidRequest, UnknownFields

KNOWN = frozenset({"model", "messages", "max_tokens"})
NINE = [f"f{i}" for i in range(9)]
LONG = "x" * (MAX_NAME_CHARS + 10)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ([], None),
        (["model", "messages", "max_tokens"], None),
        (["model", "max_token", "messages", "foo"], UnknownFields(("max_token", "foo"), 2)),
        (["Max_Tokens"], UnknownFields(("Max_Tokens",), 1)),  # (names are case-sensitive)
        (["model", *NINE], UnknownFields(tuple(NINE[:MAX_LISTED]), 9)),  # the first 8, counted
    ],
)
def test_unknown_of(keys: list[str], expected: UnknownFields | None) -> None:
    assert unknown_of(keys, KNOWN) == expected


@pytest.mark.parametrize(
    ("gateway", "tenant", "expected"),
    [
        ("warn", None, "warn"),
        ("reject", None, "reject"),
        ("warn", "reject", "reject"),
        ("reject", "warn", "warn"),
        ("reject", "reject", "reject"),
    ],
)
def test_the_tenant_s_mode_overrides_the_gateway_s(
    gateway: UnknownFieldsMode, tenant: UnknownFieldsMode | None, expected: str
) -> None:
    assert mode_of(gateway, tenant) == expected


@pytest.mark.parametrize(
    ("names", "count", "expected"),
    [
        (("max_token",), 1, "max_token"),
        (("max_token", "foo"), 2, "max_token, foo"),
        (("a.b-c~d_e",), 1, "a.b-c~d_e"),  # unreserved characters as they are
        (("evil\r\nSet-Cookie: x",), 1, "evil%0D%0ASet-Cookie%3A%20x"),  # no header injection
        (("a,b",), 1, "a%2Cb"),  # a comma in a name is not a separator
        (("caf\u00e9",), 1, "caf%C3%A9"),
        ((LONG,), 1, "x" * MAX_NAME_CHARS + "..."),
        (("\u00e9" * 20,), 1, "%C3%A9" * 10 + "..."),  # cut between characters, not escapes
        (tuple(NINE[:MAX_LISTED]), 9, ", ".join(NINE[:MAX_LISTED]) + ", +1 more"),
    ],
)
def test_header_value(names: tuple[str, ...], count: int, expected: str) -> None:
    value = header_value(UnknownFields(names, count))
    assert value == expected
    assert value.isascii() and value.isprintable()


def test_header_value_is_bounded() -> None:
    worst = UnknownFields(tuple(["\U0001f600" * 1000] * MAX_LISTED), 10**6)
    assert len(header_value(worst)) <= MAX_LISTED * (MAX_NAME_CHARS + 5) + 20


@pytest.mark.parametrize(
    ("names", "count", "style", "message", "param"),
    [
        (
            ("max_token",),
            1,
            "openai",
            "Unrecognized request argument supplied: max_token",
            "max_token",
        ),
        (
            ("max_token", "foo"),
            2,
            "openai",
            "Unrecognized request argument supplied: max_token, foo",
            "max_token",
        ),
        (
            ("a", "b"),
            5,
            "openai",
            "Unrecognized request argument supplied: a, b, +3 more",
            "a",
        ),
        (
            (LONG,),
            1,
            "openai",
            f"Unrecognized request argument supplied: {'x' * MAX_NAME_CHARS}...",
            "x" * MAX_NAME_CHARS + "...",
        ),
        (
            ("max_token",),
            1,
            "anthropic",
            "max_token: Extra inputs are not permitted",
            "max_token",
        ),
        (
            ("max_token", "foo"),
            2,
            "anthropic",
            "max_token: Extra inputs are not permitted, foo: Extra inputs are not permitted",
            "max_token",
        ),
    ],
)
def test_refusal(
    names: tuple[str, ...], count: int, style: Style, message: str, param: str
) -> None:
    err = refusal(UnknownFields(names, count), style)
    assert isinstance(err, InvalidRequest)
    assert (err.status, err.type, err.message, err.param) == (
        400,
        "invalid_request_error",
        message,
        param,
    )


U = UnknownFields(("max_token", "foo"), 2)


def test_admit_warns_once_naming_them(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.policy.unknown_fields")
    admit(U, "rid-1", Tenant("team"), "warn")
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "request rid-1 (tenant team): fields present in the request but ignored: max_token, foo"
    )


@pytest.mark.parametrize(
    ("gateway", "tenant", "refused"),
    [
        ("warn", None, False),
        ("reject", None, True),
        ("warn", "reject", True),
        ("reject", "warn", False),
    ],
)
def test_admit_refuses_as_the_mode_says(
    gateway: UnknownFieldsMode,
    tenant: UnknownFieldsMode | None,
    refused: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.policy.unknown_fields")
    who = Tenant("team", unknown_fields=tenant)
    if refused:
        with pytest.raises(InvalidRequest, match=r"^Unrecognized request argument supplied"):
            admit(U, "rid", who, gateway)
        assert caplog.records == []  # (the 400 says it: no warning besides)
    else:
        admit(U, "rid", who, gateway)
        assert len(caplog.records) == 1


def test_the_config_keys() -> None:
    config = parse(
        "gateway: {unknown_fields: reject}\n"
        "tenants:\n"
        "  - {name: a, keys: [sk-a], unknown_fields: warn}\n"
        "  - {name: b, keys: [sk-b]}\n",
        "gateway.yaml",
    )
    assert config.gateway.unknown_fields == "reject"
    tenants = Tenants(config.tenants)
    assert tenants.resolve("sk-a").unknown_fields == "warn"
    assert tenants.resolve("sk-b").unknown_fields is None
    assert parse("models: [m]", "gateway.yaml").gateway.unknown_fields == "warn"  # the default
    with pytest.raises(ConfigError, match="unknown_fields"):
        parse("gateway: {unknown_fields: ignore}", "gateway.yaml")
