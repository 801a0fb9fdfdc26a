"""Each of N workers holds 1/N of every limit."""

from __future__ import annotations

import pytest

from gateway.config.loader import parse
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
