from __future__ import annotations

import hashlib

import pytest

from gateway.config.tenants import PRIORITY_MIN, ModelOverride, TenantConfig
from gateway.policy.budget import Budget
from gateway.policy.grants import Allowance, Grant
from gateway.policy.tenants import ANONYMOUS, UNLIMITED, Limits, Tenant, Tenants, bearer_key
from gateway.types import Unauthorized

from ._util import tenant


def _directory(anonymous: str | None = None) -> Tenants:
    return Tenants(
        [
            TenantConfig(name="gold", keys=["sk-gold", "sk-gold-2"], default_priority=10),
            TenantConfig(name="free", keys=["sk-free"]),
            TenantConfig(name="guest"),
        ],
        anonymous,
    )


@pytest.mark.parametrize(
    ("key", "anonymous", "name"),
    [
        ("sk-gold", None, "gold"),
        ("sk-gold-2", None, "gold"),
        ("sk-free", "guest", "free"),
        (None, "guest", "guest"),
        ("", "guest", "guest"),
        (None, None, None),  # no key, no anonymous tenant: 401
        ("", None, None),
        ("sk-nope", None, None),
        ("sk-nope", "guest", None),  # a wrong key is never anonymous
        ("sk-gol", "guest", None),
        ("SK-GOLD", None, None),
    ],
)
def test_resolve(key: str | None, anonymous: str | None, name: str | None) -> None:
    d = _directory(anonymous)
    if name is None:
        with pytest.raises(Unauthorized) as e:
            d.resolve(key)
        assert e.value.status == 401
    else:
        assert d.resolve(key).name == name


@pytest.mark.parametrize("key", [None, "", "sk-anything", "EMPTY"])
def test_no_tenants_configured_means_open_and_unlimited(key: str | None) -> None:
    d = Tenants()
    t = d.resolve(key)
    assert t.name == ANONYMOUS and t.limits("m") == UNLIMITED and d.open


def test_keys_are_not_kept_in_clear() -> None:
    d = _directory()
    assert all(isinstance(k, bytes) and b"sk-" not in k for k in d._by_digest)


@pytest.mark.parametrize(
    ("header", "key"),
    [
        (None, None),
        ("", None),
        ("Bearer sk-1", "sk-1"),
        ("bearer   sk-1 ", "sk-1"),
        ("Bearer ", None),
        ("Basic abc", None),
        ("sk-1", None),
    ],
)
def test_bearer_key(header: str | None, key: str | None) -> None:
    assert bearer_key(header) == key


@pytest.mark.parametrize(
    ("model", "requested", "priority"),
    [
        ("m", None, 0),  # the default class
        ("m", 3, 3),
        ("m", 5, 5),
        ("m", 9, 5),  # capped at the maximum
        ("m", -7, -7),  # asking for less is fine
        ("m", -(10**9), PRIORITY_MIN),
        ("vip", None, 8),  # a model's own default and cap
        ("vip", 20, 12),
        ("cheap", None, 0),
        ("cheap", 5, 0),  # the cap is the override's
    ],
)
def test_priority_cap(model: str, requested: int | None, priority: int) -> None:
    t = tenant(
        "p",
        default_priority=0,
        max_priority=5,
        models={
            "vip": ModelOverride(default_priority=8, max_priority=12),
            "cheap": ModelOverride(max_priority=0),
        },
    )
    assert t.priority(model, requested) == priority


def test_max_priority_defaults_to_the_default_class() -> None:
    t = tenant("d", default_priority=3, models={"m": ModelOverride(default_priority=5)})
    assert (t.priority("x", None), t.priority("x", 9)) == (3, 3)
    assert (t.priority("m", None), t.priority("m", 9)) == (5, 5)


@pytest.mark.parametrize(
    ("kw", "model", "limits"),
    [
        ({}, "m", UNLIMITED),
        ({"requests_per_s": 2.5}, "m", Limits(requests_per_s=2.5, requests_burst=3)),
        ({"requests_per_s": 0.1}, "m", Limits(requests_per_s=0.1, requests_burst=1)),
        ({"tokens_per_min": 4000}, "m", Limits(tokens_per_min=4000, tokens_burst=4000)),
        (
            {"tokens_per_min": 4000, "tokens_burst": 100, "max_concurrent": 3},
            "m",
            Limits(tokens_per_min=4000, tokens_burst=100, max_concurrent=3),
        ),
        (
            {
                "requests_per_s": 1,
                "tokens_per_min": 600,
                "tokens_burst": 60,
                "max_concurrent": 3,
                "models": {"m": ModelOverride(tokens_per_min=1200)},
            },
            "m",
            # the override's bucket has the override's burst default; the rest is inherited
            Limits(1, 1, 1200, 1200, 3),
        ),
        (
            {"requests_per_s": 1, "models": {"m": ModelOverride(max_concurrent=2)}},
            "other",
            Limits(requests_per_s=1, requests_burst=1),
        ),
    ],
)
def test_limits_resolution(kw: dict[str, object], model: str, limits: Limits) -> None:
    t: Tenant = tenant("l", **kw)
    assert t.limits(model) == limits


class _Keys:
    """The store's keys as the keyring serves them."""

    def __init__(self, grants: dict[str, Grant], teams: dict[str, Grant]) -> None:
        self._grants = {hashlib.sha256(k.encode()).digest(): g for k, g in grants.items()}
        self._teams = teams

    def lookup(self, digest: bytes) -> Grant | None:
        return self._grants.get(digest)

    def team(self, tenant: str) -> Grant | None:
        return self._teams.get(tenant)


def _grant(tenant: str) -> Grant:
    return Grant("t", tenant, Allowance("key", Budget(None, None, None)))


def test_store_keys_resolve_after_the_config_files_to_their_teams_tenant() -> None:
    store_key, team_budget = _grant("acme"), _grant("acme")
    keys = _Keys({"sk-store": store_key, "sk-a": _grant("other")}, {"acme": team_budget})
    t = Tenants([TenantConfig(name="acme", keys=["sk-a"], weight=2.0)], keys=keys)
    assert not t.open
    tenant, grant = t.resolve_grant("sk-a")  # the config's key first, with its team's budget
    assert (tenant.name, grant) == ("acme", team_budget)
    tenant, grant = t.resolve_grant("sk-store")
    assert (tenant.name, tenant.weight, grant) == ("acme", 2.0, store_key)
    with pytest.raises(Unauthorized, match="invalid API key"):
        t.resolve_grant("sk-nope")


def test_a_store_keys_team_outside_the_config_is_a_tenant_without_limits() -> None:
    t = Tenants(keys=_Keys({"sk-s": _grant("team-x")}, {}))
    assert not t.open  # with a store, keys are asked for
    with pytest.raises(Unauthorized, match="missing API key"):
        t.resolve(None)
    tenant = t.resolve("sk-s")
    assert tenant.name == "team-x" and tenant.limits("m").requests_per_s is None
    assert t.resolve("sk-s") is tenant
