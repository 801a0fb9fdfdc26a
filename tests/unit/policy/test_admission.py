from __future__ import annotations

import pytest

from gateway.config.tenants import ModelOverride, RateLimits
from gateway.policy.admission import (
    Admission,
    Admitted,
    Rejected,
    estimate_prompt_tokens,
    estimate_tokens,
    format_reset,
)
from gateway.policy.tenants import Tenant
from gateway.types import GenerationRequest, Message, Sampling

from ._util import T0, FakeClock, tenant

M = "sim-llama"


def admitted(r: Admitted | Rejected) -> Admitted:
    assert isinstance(r, Admitted), r
    return r


def rejected(r: Admitted | Rejected) -> Rejected:
    assert isinstance(r, Rejected), r
    return r


def free() -> Tenant:
    return tenant(
        "free", requests_per_s=2, requests_burst=2, tokens_per_min=4000, max_concurrent=100
    )


# -- estimate -------------------------------------------------------------------------------


def _req(
    prompt: str | None = None, messages: tuple[str, ...] = (), max_tokens: int = 10
) -> GenerationRequest:
    return GenerationRequest(
        request_id="r",
        model=M,
        sampling=Sampling(max_tokens=max_tokens),
        prompt=prompt,
        messages=tuple(Message("user", c) for c in messages) if prompt is None else None,
    )


@pytest.mark.parametrize(
    ("req", "prompt_tokens"),
    [
        (_req(""), 0),
        (_req("abcd"), 1),
        (_req("abcde"), 2),
        (_req("a" * 400), 100),
        (_req("é"), 1),  # 2 bytes
        (_req("éé" + "ab"), 2),  # 6 bytes
        (_req(messages=("abc", "de")), 2),  # 5 bytes over the messages
        (_req(messages=()), 0),
    ],
)
def test_estimate(req: GenerationRequest, prompt_tokens: int) -> None:
    assert estimate_prompt_tokens(req) == prompt_tokens
    assert estimate_tokens(req) == prompt_tokens + req.sampling.max_tokens


# -- reset formatting -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (-1, "0s"),
        (0.0001, "1ms"),
        (0.02, "20ms"),
        (0.5, "500ms"),
        (0.9994, "1s"),  # rounded up to the millisecond
        (1, "1s"),
        (1.5, "1.5s"),
        (8.64, "8.64s"),
        (59.999, "59.999s"),
        (60, "1m0s"),
        (360, "6m0s"),
        (90.25, "1m30.25s"),
        (3600, "1h0m0s"),
        (3661.5, "1h1m1.5s"),
    ],
)
def test_format_reset(seconds: float, text: str) -> None:
    assert format_reset(seconds) == text


# -- requests bucket ------------------------------------------------------------------------


def test_requests_per_s_burst_then_retry_after_exactness() -> None:
    a, t, clock = Admission(), free(), FakeClock()
    admitted(a.admit(t, M, 1, clock()))
    admitted(a.admit(t, M, 1, clock()))
    r = rejected(a.admit(t, M, 1, clock()))
    assert r.status == 429
    assert r.retry_after_s == pytest.approx(0.5)
    assert dict(r.headers)["retry-after"] == "1"
    assert dict(r.headers)["retry-after-ms"] == "500"
    assert r.retry_after_s is not None
    rejected(a.admit(t, M, 1, clock() + r.retry_after_s - 1e-3))
    admitted(a.admit(t, M, 1, clock() + r.retry_after_s))


def test_a_rejection_charges_nothing() -> None:
    a, t = Admission(), free()
    admitted(a.admit(t, M, 3000, T0))
    rejected(a.admit(t, M, 3000, T0))  # tokens do not fit: the request must not be charged
    admitted(a.admit(t, M, 100, T0))
    assert dict(a.headers(t, M, T0))["x-ratelimit-remaining-requests"] == "0"


# -- tokens bucket --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second", "retry_after_s"),
    [
        (3000, 3000, (3000 - 1000) / (4000 / 60)),  # 30 s
        (4000, 1, 60 / 4000),
        (3999, 2, 60 / 4000),
    ],
)
def test_tokens_retry_after(first: int, second: int, retry_after_s: float) -> None:
    a, t = Admission(), free()
    admitted(a.admit(t, M, first, T0))
    r = rejected(a.admit(t, M, second, T0 + 0.0))
    assert r.retry_after_s == pytest.approx(retry_after_s)
    assert r.retry_after_s is not None
    at = T0 + r.retry_after_s
    rejected(a.admit(t, M, second, at - 1e-3))
    admitted(a.admit(t, M, second, at))


def test_request_larger_than_the_tokens_burst_cannot_be_retried() -> None:
    a, t = Admission(), free()
    r = rejected(a.admit(t, M, 4001, T0))
    assert (r.status, r.retry_after_s) == (429, None)
    assert "too large" in r.reason
    assert "retry-after" not in dict(r.headers)


@pytest.mark.parametrize(
    ("estimate", "actual", "remaining"),
    [
        (3000, 3000, 1000),
        (3000, 500, 3500),  # refund what was not generated
        (3000, 0, 4000),  # aborted before anything: everything back
        (1000, 1500, 2500),  # the real prompt was larger: charge the difference
        (4000, 6000, 0),  # a debt: remaining shows 0
    ],
)
def test_reconciliation(estimate: int, actual: int, remaining: int) -> None:
    a, t = Admission(), free()
    ticket = admitted(a.admit(t, M, estimate, T0))
    a.complete(ticket, actual, T0)
    h = dict(a.headers(t, M, T0))
    assert h["x-ratelimit-remaining-tokens"] == str(remaining)
    a.complete(ticket, 0, T0)  # a second completion changes nothing
    assert dict(a.headers(t, M, T0)) == h


def test_debt_delays_the_next_request() -> None:
    a, t = Admission(), free()
    a.complete(admitted(a.admit(t, M, 4000, T0)), 6000, T0)  # 2000 in debt
    r = rejected(a.admit(t, M, 1000, T0 + 1))
    assert r.retry_after_s == pytest.approx(3000 / (4000 / 60) - 1)


# -- concurrency ----------------------------------------------------------------------------


def test_concurrency_limit() -> None:
    a, t = Admission(), tenant("c", max_concurrent=2)
    one = admitted(a.admit(t, M, 1, T0))
    admitted(a.admit(t, M, 1, T0))
    r = rejected(a.admit(t, M, 1, T0))
    assert r.status == 429 and "concurrent" in r.reason and r.retry_after_s == 1.0
    a.complete(one, 1, T0)
    admitted(a.admit(t, M, 1, T0))
    a.complete(one, 1, T0)  # already completed: does not free a second slot
    rejected(a.admit(t, M, 1, T0))


def test_limits_are_per_model_with_overrides() -> None:
    t = tenant(
        "o",
        requests_per_s=1,
        max_concurrent=1,
        models={"big": ModelOverride(requests_per_s=5, requests_burst=3)},
    )
    a = Admission()
    admitted(a.admit(t, "small", 1, T0))
    rejected(a.admit(t, "small", 1, T0))
    admitted(a.admit(t, "other", 1, T0))  # own bucket per model
    admitted(a.admit(t, "big", 1, T0))
    rejected(a.admit(t, "big", 1, T0))  # max_concurrent inherited: 1
    t2 = tenant(
        "p", requests_per_s=1, models={"big": ModelOverride(requests_per_s=5, requests_burst=3)}
    )
    for _ in range(3):
        admitted(a.admit(t2, "big", 1, T0))
    assert rejected(a.admit(t2, "big", 1, T0)).retry_after_s == pytest.approx(0.2)


# -- model pool -----------------------------------------------------------------------------


def test_model_pool_limit_is_shared_by_tenants() -> None:
    a = Admission({M: RateLimits(requests_per_s=3, requests_burst=3)})
    x, y = tenant("x"), tenant("y")
    admitted(a.admit(x, M, 1, T0))
    admitted(a.admit(y, M, 1, T0))
    admitted(a.admit(x, M, 1, T0))
    r = rejected(a.admit(y, M, 1, T0))
    assert r.status == 503 and r.retry_after_s == pytest.approx(1 / 3)
    assert r.retry_after_s is not None
    admitted(a.admit(y, "other-model", 1, T0))
    rejected(a.admit(y, M, 1, T0 + r.retry_after_s - 1e-3))
    admitted(a.admit(y, M, 1, T0 + r.retry_after_s))


def test_model_pool_tokens_are_reconciled() -> None:
    a = Admission({M: RateLimits(tokens_per_min=600)})
    x, y = tenant("x"), tenant("y")
    ticket = admitted(a.admit(x, M, 600, T0))
    rejected(a.admit(y, M, 100, T0))
    a.complete(ticket, 100, T0)
    admitted(a.admit(y, M, 500, T0))
    assert rejected(a.admit(y, M, 700, T0)).retry_after_s is None  # over the pool's burst


def test_over_both_limits_waits_for_both() -> None:
    a = Admission({M: RateLimits(requests_per_s=1, requests_burst=1)})
    t = tenant("t", requests_per_s=2, requests_burst=1)
    admitted(a.admit(t, M, 1, T0))
    r = rejected(a.admit(t, M, 1, T0))
    assert r.status == 429 and r.retry_after_s == pytest.approx(1.0)


# -- headers --------------------------------------------------------------------------------


def test_headers_after_admission() -> None:
    a, t = Admission(), free()
    h = dict(admitted(a.admit(t, M, 1000, T0)).headers)
    assert h == {
        "x-ratelimit-limit-requests": "2",
        "x-ratelimit-remaining-requests": "1",
        "x-ratelimit-reset-requests": "500ms",
        "x-ratelimit-limit-tokens": "4000",
        "x-ratelimit-remaining-tokens": "3000",
        "x-ratelimit-reset-tokens": "15s",
    }
    h = dict(a.headers(t, M, T0 + 10))
    assert h["x-ratelimit-remaining-requests"] == "2"
    assert h["x-ratelimit-reset-requests"] == "0s"
    assert h["x-ratelimit-remaining-tokens"] == "3666"
    assert h["x-ratelimit-reset-tokens"] == "5s"


@pytest.mark.parametrize(
    ("tenant_kw", "pool", "names"),
    [
        ({}, None, []),
        ({"requests_per_s": 1}, None, ["requests"]),
        ({"tokens_per_min": 100}, None, ["tokens"]),
        ({}, RateLimits(tokens_per_min=100), ["tokens"]),  # the pool's, for lack of the tenant's
        ({"requests_per_s": 1}, RateLimits(tokens_per_min=100), ["requests", "tokens"]),
    ],
)
def test_headers_present_only_for_limited_dimensions(
    tenant_kw: dict[str, float], pool: RateLimits | None, names: list[str]
) -> None:
    a = Admission({M: pool} if pool else None)
    ticket = admitted(a.admit(tenant("h", **tenant_kw), M, 1, T0))
    expected = [f"x-ratelimit-{k}-{n}" for n in names for k in ("limit", "remaining", "reset")]
    assert [k for k, _ in ticket.headers] == expected


def test_pool_headers_when_the_tenant_is_unlimited() -> None:
    a = Admission({M: RateLimits(requests_per_s=10, requests_burst=20)})
    h = dict(admitted(a.admit(tenant("u"), M, 1, T0)).headers)
    assert (h["x-ratelimit-limit-requests"], h["x-ratelimit-remaining-requests"]) == ("20", "19")
    assert h["x-ratelimit-reset-requests"] == "100ms"
