from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.config.routing import (
    DEFAULT_FILTERS,
    DEFAULT_SCORERS,
    HealthSettings,
    RetrySettings,
    RoutingSettings,
)


def test_empty_sections_are_the_defaults() -> None:
    r = msgspec.convert({}, RoutingSettings)
    assert r == RoutingSettings()
    assert [f.type for f in r.profile.filters] == ["serves", "not_ejected", "healthy", "free_slot"]
    assert [(s.type, s.weight) for s in r.profile.scorers] == [("load", 1.0), ("prefix", 1.0)]
    assert r.profile.picker.type == "max_score"
    assert r.profile.filters == DEFAULT_FILTERS and r.profile.scorers == DEFAULT_SCORERS
    h = msgspec.convert({}, HealthSettings)
    assert h.heartbeat_interval_s is None and h.ejection.enabled
    assert h.stall_timeout_s == 10.0
    assert (h.stall_startup_grace_s, h.stall_step_multiplier) == (30.0, 4.0)
    e = h.ejection
    assert (e.max_ejection_percent, e.always_eject_one, e.healthy_panic_threshold) == (
        50.0,
        True,
        50.0,
    )
    assert msgspec.convert({"stall_timeout_s": None}, HealthSettings).stall_timeout_s is None
    assert msgspec.convert({}, RetrySettings).max_attempts == 3


def test_profile_from_yaml_shape() -> None:
    r = msgspec.convert(
        {
            "profile": {
                "name": "chat",
                "filters": [
                    {"type": "serves"},
                    {"type": "healthy", "params": {"prefer_up": False}},
                ],
                "scorers": [
                    {"type": "load", "weight": 2},
                    {"type": "session", "weight": 3, "params": {"load_epsilon": 0.5}},
                ],
                "picker": {"type": "random"},
            },
            "prefix": {"block_chars": 128, "max_blocks": 0},
            "seed": 7,
        },
        RoutingSettings,
    )
    assert r.profile.scorers[1].params == {"load_epsilon": 0.5}
    assert r.prefix.max_blocks == 0 and r.seed == 7


@pytest.mark.parametrize(
    ("kind", "data", "needle"),
    [
        (RoutingSettings, {"profile": {"scorers": [{"type": "load", "weight": -1}]}}, "weight"),
        (RoutingSettings, {"profile": {"filters": [{"type": ""}]}}, r"filters\[0\]\.type"),
        (RoutingSettings, {"profile": {"bogus": 1}}, "bogus"),
        (RoutingSettings, {"prefix": {"block_chars": 0}}, "block_chars"),
        (HealthSettings, {"heartbeat_interval_s": 0}, "heartbeat_interval_s"),
        (HealthSettings, {"down_after_intervals": 2}, "down_after_intervals"),
        (HealthSettings, {"stall_timeout_s": 0}, "stall_timeout_s"),
        (
            HealthSettings,
            {"heartbeat_interval_s": 1, "stall_timeout_s": 2},
            "stall_timeout_s",
        ),
        (HealthSettings, {"ejection": {"max_ejection_percent": 101}}, "max_ejection_percent"),
        (
            HealthSettings,
            {"ejection": {"healthy_panic_threshold": -1}},
            "healthy_panic_threshold",
        ),
        (HealthSettings, {"stall_startup_grace_s": -1}, "stall_startup_grace_s"),
        (HealthSettings, {"stall_step_multiplier": -0.5}, "stall_step_multiplier"),
        (
            HealthSettings,
            {"ejection": {"base_ejection_time_s": 60, "max_ejection_time_s": 30}},
            "max_ejection_time_s",
        ),
        (HealthSettings, {"ejection": {"consecutive_failures": 0}}, "consecutive_failures"),
        (RetrySettings, {"max_attempts": 0}, "max_attempts"),
        (RetrySettings, {"budget_ratio": -0.1}, "budget_ratio"),
        (RetrySettings, {"budget_window_s": 0}, "budget_window_s"),
    ],
)
def test_bad_values_name_the_field(kind: type[Any], data: dict[str, Any], needle: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=needle):
        msgspec.convert(data, kind)
