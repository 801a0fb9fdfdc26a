"""Prices per model and budgets per tenant: what `shardgate_cost_usd_total` counts against.

    pricing:
      models:
        sim-llama: {prompt_per_1k_usd: 0.0005, completion_per_1k_usd: 0.0015}
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

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens * self.prompt_per_1k_usd + completion_tokens * self.completion_per_1k_usd
        ) / 1000.0


class TenantBudget(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # Exposed as `shardgate_tenant_budget_usd`; the cost alert fires when the month's projected
    # spend runs 20 % over it.
    monthly_budget_usd: PositiveUsd | None = None


class Pricing(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    models: dict[str, ModelPrice] = {}
    tenants: dict[str, TenantBudget] = {}

    def cost_usd(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        price = self.models.get(model)
        return 0.0 if price is None else price.cost_usd(prompt_tokens, completion_tokens)

    def budgets(self) -> dict[str, float]:
        """Tenant -> monthly budget in dollars, for the tenants that have one."""
        return {
            name: t.monthly_budget_usd
            for name, t in self.tenants.items()
            if t.monthly_budget_usd is not None
        }
