from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from gateway.config.schema import Config
from gateway.config.tenants import (
    QueueBounds,
    RateLimits,
    SchedulingConfig,
    TenantConfig,
    check_tenancy,
)

DEMO = Path(__file__).parents[3] / "configs" / "tenants-demo.yaml"
SECTIONS = ("tenants", "anonymous", "scheduling", "model_limits")


class Sections(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The top-level fields this schema adds to Config, as they will be declared there."""

    tenants: list[TenantConfig] = []
    anonymous: str | None = None
    scheduling: SchedulingConfig = SchedulingConfig()
    model_limits: dict[str, RateLimits] = {}

    def __post_init__(self) -> None:
        check_tenancy(self.tenants, self.anonymous)


def test_empty_means_anonymous_and_no_limits() -> None:
    s = msgspec.convert({}, Sections)
    assert (s.tenants, s.anonymous, s.model_limits) == ([], None, {})
    assert s.scheduling.bounds(7) == QueueBounds()


def test_demo_config_decodes() -> None:
    data = yaml.safe_load(DEMO.read_text())
    s = msgspec.convert({k: data.pop(k) for k in SECTIONS if k in data}, Sections)
    msgspec.convert(data, Config)  # the rest is the local cluster
    by_name = {t.name: t for t in s.tenants}
    assert by_name["gold"].keys == ["sk-gold"] and by_name["gold"].priorities() == (10, 10)
    free = by_name["free"]
    assert (free.requests_per_s, free.requests_burst, free.tokens_per_min) == (2, 2, 4000)
    assert free.priorities() == (0, 0)
    assert by_name["batch"].priorities()[0] < s.scheduling.sheddable_below
    assert s.scheduling.bounds(-5).max_wait_s == 300


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"tenants": [{"name": "a", "bogus": 1}]}, "bogus"),
        ({"tenants": [{"keys": ["k"]}]}, "name"),
        ({"tenants": [{"name": "a", "requests_per_s": 0}]}, "requests_per_s"),
        ({"tenants": [{"name": "a", "requests_burst": 0, "requests_per_s": 1}]}, "requests_burst"),
        ({"tenants": [{"name": "a", "requests_burst": 5}]}, "requests_burst needs"),
        ({"tenants": [{"name": "a", "tokens_burst": 5}]}, "tokens_burst needs"),
        ({"tenants": [{"name": "a", "weight": 0}]}, "weight"),
        ({"tenants": [{"name": "a", "keys": [""]}]}, "keys"),
        ({"tenants": [{"name": "a", "keys": ["k", "k"]}]}, "key twice"),
        ({"tenants": [{"name": "a", "default_priority": 5000}]}, "default_priority"),
        ({"tenants": [{"name": "a", "default_priority": 5, "max_priority": 1}]}, "above"),
        (
            {
                "tenants": [
                    {"name": "a", "max_priority": 1, "models": {"m": {"default_priority": 3}}}
                ]
            },
            "models.m: default_priority 3 is above max_priority 1",
        ),
        ({"tenants": [{"name": "a", "models": {"m": {"weight": 2}}}]}, "weight"),
        ({"tenants": [{"name": "a"}, {"name": "a"}]}, "duplicate name"),
        ({"tenants": [{"name": "a", "keys": ["k"]}, {"name": "b", "keys": ["k"]}]}, "reuses"),
        ({"tenants": [{"name": "a"}], "anonymous": "b"}, "anonymous"),
        ({"anonymous": "b"}, "anonymous"),
        ({"scheduling": {"max_queued": 0}}, "max_queued"),
        ({"scheduling": {"default": {"max_wait_s": 0}}}, "max_wait_s"),
        ({"scheduling": {"classes": {5: {"max_depth": 0}}}}, "max_depth"),
        ({"scheduling": {"classes": {5000: {}}}}, "5000"),
        ({"scheduling": {"preemption": {"min_run_s": -1}}}, "min_run_s"),
        ({"scheduling": {"preemption": {"max_per_request": -1}}}, "max_per_request"),
        ({"scheduling": {"retry_after_s": 0}}, "retry_after_s"),
        ({"model_limits": {"m": {"tokens_per_min": -1}}}, "tokens_per_min"),
        ({"model_limits": {"m": {"max_concurrent": 1}}}, "max_concurrent"),
    ],
)
def test_bad_config_names_the_field(data: dict[str, Any], needle: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=needle):
        msgspec.convert(data, Sections)
