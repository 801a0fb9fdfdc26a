from __future__ import annotations

import math

import pytest

from gateway.config.tenants import ObjectiveConfig
from gateway.policy import objectives
from gateway.policy.objectives import TPOT_HEADER, TTFT_HEADER, latest_start, pause_misses
from gateway.types import InvalidRequest, Objective


@pytest.mark.parametrize(
    ("ttft", "tpot", "expected"),
    [
        (None, None, None),
        ("500", None, Objective(0.5, None)),
        (None, "40", Objective(None, 0.04)),
        ("1e3", "25.5", Objective(1.0, 0.0255)),
        (250.0, 30, Objective(0.25, 0.03)),
    ],
)
def test_parse(ttft: str | None, tpot: str | None, expected: Objective | None) -> None:
    assert objectives.parse(ttft, tpot) == expected


@pytest.mark.parametrize(
    ("ttft", "tpot", "named"),
    [
        ("fast", None, TTFT_HEADER),
        ("0", None, TTFT_HEADER),
        ("-5", None, TTFT_HEADER),
        ("nan", None, TTFT_HEADER),
        ("inf", None, TTFT_HEADER),
        (None, "3600001", TPOT_HEADER),
        (None, "", TPOT_HEADER),
    ],
)
def test_parse_refuses_what_is_no_target(ttft: str | None, tpot: str | None, named: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        objectives.parse(ttft, tpot)
    assert e.value.param == named
    assert named in e.value.message


TENANT = ObjectiveConfig(ttft_ms=800)
KLASS = ObjectiveConfig(ttft_ms=2000, tpot_ms=50)


@pytest.mark.parametrize(
    ("asked", "tenant", "klass", "expected"),
    [
        (None, None, None, None),
        (None, None, KLASS, Objective(2.0, 0.05)),
        (None, TENANT, KLASS, Objective(0.8, 0.05)),  # figure by figure
        (Objective(0.1, None), TENANT, KLASS, Objective(0.1, 0.05)),
        (Objective(None, 0.02), TENANT, None, Objective(0.8, 0.02)),
        (Objective(0.3, 0.01), TENANT, KLASS, Objective(0.3, 0.01)),
    ],
)
def test_resolve_the_request_then_its_tenant_then_its_class(
    asked: Objective | None,
    tenant: ObjectiveConfig | None,
    klass: ObjectiveConfig | None,
    expected: Objective | None,
) -> None:
    assert objectives.resolve(asked, tenant, klass) == expected


@pytest.mark.parametrize(
    ("ttft", "engine", "expected"),
    [
        (1.0, 0.25, 100.75),
        (1.0, None, math.inf),  # nothing learned: never refused early
        (None, 0.25, math.inf),
        (0.1, 0.25, 99.85),  # already too late: the caller refuses at once
    ],
)
def test_latest_start(ttft: float | None, engine: float | None, expected: float) -> None:
    assert latest_start(100.0, ttft, engine) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("objective", "first_token_at", "generated", "pause", "misses"),
    [
        (None, 0.0, 0, 100.0, False),
        # before its first token: arrival 10, now 10.5, target 1 s
        (Objective(1.0, None), 0.0, 0, 0.4, False),
        (Objective(1.0, None), 0.0, 0, 0.6, True),
        (Objective(None, 0.05), 0.0, 0, 10.0, False),  # no TTFT target: free to pause
        # after it: first token at 10.1, 8 tokens so far, now 10.5 (0.05 s a token so far)
        (Objective(1.0, 0.1), 10.1, 8, 0.35, False),  # (0.4 + 0.35) / 8 < 0.1
        (Objective(1.0, 0.1), 10.1, 8, 0.5, True),
        (Objective(1.0, None), 10.1, 8, 99.0, False),  # TTFT met already, no TPOT target
        # a target already missed protects nothing (the victim is fair game)
        (Objective(0.2, None), 0.0, 0, 0.1, False),
        (Objective(1.0, 0.01), 10.1, 8, 0.1, False),
    ],
)
def test_pause_misses(
    objective: Objective | None,
    first_token_at: float,
    generated: int,
    pause: float,
    misses: bool,
) -> None:
    assert pause_misses(objective, 10.5, 10.0, first_token_at, generated, pause) is misses
