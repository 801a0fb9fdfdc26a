from __future__ import annotations

import pytest

from gateway.policy.budget import Budget
from gateway.policy.grants import Allowance, BudgetExceeded, Grant, admit, buckets, settle
from gateway.types import RateLimited, Unauthorized


def allowance(
    limit: float | None = None,
    models: frozenset[str] = frozenset(),
    rpm: int | None = None,
    tpm: int | None = None,
) -> Allowance:
    r, t = buckets(rpm, tpm, 0.0)
    return Allowance("key k", Budget(limit, None, None), models, r, t)


def test_a_key_outside_its_models_is_a_401_naming_them() -> None:
    g = Grant("t", "team", allowance(models=frozenset({"a", "b"})))
    with pytest.raises(Unauthorized, match=r"not allowed to call model c \(only: a, b\)"):
        admit(g, "c", 10, 0.0, 0.0, 0.0)
    admit(g, "a", 10, 0.0, 0.0, 0.0)


def test_an_expired_key_is_a_401() -> None:
    g = Grant("t", "team", allowance(), expires=100.0)
    admit(g, "m", 1, 0.0, 99.9, 0.0)
    with pytest.raises(Unauthorized, match="Expired Key"):
        admit(g, "m", 1, 0.0, 100.0, 0.0)


def test_requests_per_minute_refuse_with_a_retry_after() -> None:
    g = Grant("t", "team", allowance(rpm=2))
    admit(g, "m", 1, 0.0, 0.0, 0.0)
    admit(g, "m", 1, 0.0, 0.0, 0.0)
    with pytest.raises(RateLimited) as e:
        admit(g, "m", 1, 0.0, 0.0, 0.0)
    assert dict(e.value.headers) == {"retry-after": "30"}  # one request back in 30 s


def test_tokens_are_trued_up_to_the_real_usage() -> None:
    a = allowance(tpm=100)
    g = Grant("t", "team", a)
    c = admit(g, "m", 80, 0.0, 0.0, 0.0)
    settle(c, 10, 0.0, 0.0, 0.0)  # 70 given back
    assert a.tokens is not None and a.tokens.level(0.0) == pytest.approx(90)
    settle(c, 10, 0.0, 0.0, 0.0)  # once only
    assert a.tokens.level(0.0) == pytest.approx(90)


def test_a_team_budget_stops_its_keys_and_a_refusal_charges_nothing() -> None:
    team = allowance(limit=1.0)
    team.name = "team t"
    own = allowance(rpm=10)
    g = Grant("t", "t", own, team)
    c = admit(g, "m", 1, 0.7, 0.0, 0.0)
    settle(c, 1, 1.0, 0.0, 0.0)
    assert own.budget.spent == 1.0 and team.budget.spent == 1.0
    assert own.requests is not None
    level = own.requests.level(0.0)
    with pytest.raises(BudgetExceeded, match=r"team t spent \$1.000000 of its \$1.000000"):
        admit(g, "m", 1, 0.7, 0.0, 0.0)
    assert own.requests.level(0.0) == level and own.budget.reserved == 0
