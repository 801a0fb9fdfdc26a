from __future__ import annotations

import msgspec
import pytest
import yaml

from gateway.config.pricing import ModelPrice, Pricing

YAML = """
models:
  llama: {prompt_per_1k_usd: 0.0005, completion_per_1k_usd: 0.0015}
  free: {prompt_per_1k_usd: 0, completion_per_1k_usd: 0}
tenants:
  acme: {monthly_budget_usd: 500}
  beta: {}
"""


def test_decodes_from_yaml_and_prices_per_1k_tokens() -> None:
    p = msgspec.convert(yaml.safe_load(YAML), Pricing)
    assert p.cost_usd("llama", 2000, 1000) == pytest.approx(0.001 + 0.0015)
    assert p.cost_usd("free", 10_000, 10_000) == 0.0
    assert p.cost_usd("unpriced", 10_000, 10_000) == 0.0
    assert p.budgets() == {"acme": 500.0}


def test_prompt_and_completion_are_priced_separately() -> None:
    price = ModelPrice(prompt_per_1k_usd=3.0, completion_per_1k_usd=15.0)
    assert price.cost_usd(1000, 0) == 3.0
    assert price.cost_usd(0, 1000) == 15.0
    assert price.cost_usd(500, 100) == pytest.approx(1.5 + 1.5)


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ({"models": {"m": {"prompt_per_1k_usd": -1, "completion_per_1k_usd": 0}}}, "$.models"),
        ({"models": {"m": {"prompt_per_1k_usd": 1}}}, "completion_per_1k_usd"),
        ({"tenants": {"t": {"monthly_budget_usd": 0}}}, "$.tenants"),
        ({"tenants": {"t": {"budget": 5}}}, "budget"),
        ({"currency": "eur"}, "currency"),
    ],
)
def test_bad_pricing_names_the_field(doc: object, where: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=rf"{where.replace('$', '[$]')}"):
        msgspec.convert(doc, Pricing)
