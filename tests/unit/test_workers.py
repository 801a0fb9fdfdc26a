"""Each of N workers holds 1/N of every limit, also after a reload."""

from __future__ import annotations

import pytest

from gateway.app import Gateway
from gateway.config.loader import parse
from gateway.policy.admission import Admitted
from gateway.policy.tenants import kept_tenants
from gateway.workers import share

CONFIG = """
models: [m]
tenants:
  - name: t
    keys: [k]
    requests_per_s: 10
    requests_burst: 3
    tokens_per_min: 6000
    max_concurrent: 5
    models: {m: {requests_per_s: 4, max_concurrent: 1}}
model_limits: {m: {requests_per_s: 100, requests_burst: 7}}
model_capacity: {m: 9}
"""


@pytest.mark.parametrize(
    ("n", "rps", "burst", "tpm", "conc", "m_rps", "m_conc", "pool_rps", "pool_burst", "cap"),
    [
        (1, 10, 3, 6000, 5, 4, 1, 100, 7, 9),
        (2, 5, 2, 3000, 3, 2, 1, 50, 4, 5),
        (4, 2.5, 1, 1500, 2, 1, 1, 25, 2, 3),
    ],
)
def test_share(
    n: int,
    rps: float,
    burst: int,
    tpm: float,
    conc: int,
    m_rps: float,
    m_conc: int,
    pool_rps: float,
    pool_burst: int,
    cap: int,
) -> None:
    c = share(parse(CONFIG), n)
    t = c.tenants[0]
    assert (t.requests_per_s, t.requests_burst, t.tokens_per_min, t.max_concurrent) == (
        rps,
        burst,
        tpm,
        conc,
    )
    assert (t.models["m"].requests_per_s, t.models["m"].max_concurrent) == (m_rps, m_conc)
    pool = c.model_limits["m"]
    assert (pool.requests_per_s, pool.requests_burst) == (pool_rps, pool_burst)
    assert c.model_capacity["m"] == cap
    assert t.keys == ["k"]


LIMITED = """
models: [m]
tenants:
  - name: t
    keys: [k]
    requests_per_s: 0.001
    requests_burst: 4
"""


@pytest.mark.parametrize(
    ("edit", "kept"),
    [
        ("", {"t"}),
        ("    weight: 2\n", {"t"}),  # not a bucket setting
        ("    default_priority: 1\n    max_priority: 3\n", {"t"}),
        ("    keys: [k, k2]\n", {"t"}),
        ("    max_concurrent: 3\n", set()),
        ("    tokens_per_min: 600\n", set()),
        ("    models: {m: {requests_per_s: 0.001, requests_burst: 4}}\n", {"t"}),  # the same
        ("    models: {m: {requests_per_s: 1}}\n", set()),
    ],
)
def test_kept_tenants_compares_what_the_buckets_are_built_from(edit: str, kept: set[str]) -> None:
    old = parse(LIMITED)
    text = LIMITED + edit
    if "keys:" in edit:
        text = LIMITED.replace("    keys: [k]\n", "") + edit
    assert kept_tenants(old.tenants, parse(text).tenants) == kept


def test_kept_tenants_of_open_configs_and_renames() -> None:
    assert kept_tenants(parse("models: [m]").tenants, parse("models: [m, n]").tenants) == {
        "anonymous"
    }
    renamed = parse(LIMITED.replace("name: t", "name: u"))
    assert kept_tenants(parse(LIMITED).tenants, renamed.tenants) == set()
    assert kept_tenants(parse("models: [m]").tenants, parse(LIMITED).tenants) == set()


def _admitted(gw: Gateway, n: int, now: float) -> int:
    tenant = gw.service.tenants.resolve("k")
    results = [gw.service.admission.policy.admit(tenant, "m", 1, now) for _ in range(n)]
    return sum(isinstance(r, Admitted) for r in results)


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_reload_applies_this_workers_share_and_keeps_the_buckets(workers: int) -> None:
    """Edits that do not touch the buckets: each worker still holds 1/N of the burst, and its
    bucket stays as drained as it was."""
    gw = Gateway(share(parse(LIMITED), workers), worker_of=workers)
    burst = 4 // workers
    assert _admitted(gw, 6, now=100.0) == burst
    edited = LIMITED + "    weight: 2\ngateway: {default_max_tokens: 8}\n"
    gw.apply(parse(edited), 2, "ab")
    assert gw.config.gateway.default_max_tokens == 8
    assert gw.config.tenants[0].requests_burst == burst
    assert _admitted(gw, 6, now=101.0) == 0
    # A changed limit starts a fresh bucket, of this worker's share of the new burst.
    gw.apply(parse(LIMITED.replace("requests_burst: 4", "requests_burst: 8")), 3, "abc")
    assert _admitted(gw, 12, now=102.0) == 8 // workers


def test_with_redis_the_limits_are_not_split_only_the_slots() -> None:
    c = share(parse(CONFIG + "redis: {url: 'redis://127.0.0.1:1/0'}\n"), 4)
    t = c.tenants[0]
    assert (t.requests_per_s, t.requests_burst, t.max_concurrent) == (10, 3, 5)
    assert c.model_limits["m"].requests_per_s == 100
    assert c.model_capacity == {"m": 3}
