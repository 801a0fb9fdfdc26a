"""Prices per model and budgets per tenant: what `shardgate_cost_usd_total` counts against.

    pricing:
      models:
        sim-llama: {prompt_per_1k_usd: 0.0005, completion_per_1k_usd: 0.0015,
                    cached_prompt_per_1k_usd: 0.00025}
      tenants:
        acme: {monthly_budget_usd: 500}

A model without a price costs nothing; a tenant without a budget raises no cost alert.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

Usd = Annotated[float, msgspec.Meta(ge=0)]
PositiveUsd = Annotated[float, msgspec.Meta(gt=0)]


class ModelPrice(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    prompt_per_1k_usd: Usd
    completion_per_1k_usd: Usd
    # The prompt tokens the engine found cached (left out: the prompt's price).
    cached_prompt_per_1k_usd: Usd | None = None

    def cost_usd(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        """`cached_tokens`: those of the prompt tokens that were cached."""
        cost = prompt_tokens * self.prompt_per_1k_usd
        cost += completion_tokens * self.completion_per_1k_usd
        cached = self.cached_prompt_per_1k_usd
        if cached is not None and cached_tokens:
            cost += min(cached_tokens, prompt_tokens) * (cached - self.prompt_per_1k_usd)
        return cost / 1000.0


class TenantBudget(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # Exposed as `shardgate_tenant_budget_usd`; the cost alert fires when the month's projected
    # spend runs 20 % over it.
    monthly_budget_usd: PositiveUsd | None = None


class Pricing(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    models: dict[str, ModelPrice] = {}
    tenants: dict[str, TenantBudget] = {}

    def cost_usd(
        self, model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
    ) -> float:
        price = self.models.get(model)
        if price is None:
            return 0.0
        return price.cost_usd(prompt_tokens, completion_tokens, cached_tokens)

    def budgets(self) -> dict[str, float]:
        """Tenant -> monthly budget in dollars, for the tenants that have one."""
        return {
            name: t.monthly_budget_usd
            for name, t in self.tenants.items()
            if t.monthly_budget_usd is not None
        }
