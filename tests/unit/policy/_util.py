"""Helpers shared by the policy tests."""

from __future__ import annotations

from typing import Any

from gateway.config.tenants import TenantConfig
from gateway.policy.tenants import Tenant

T0 = 1000.0  # fake clock start: policies take `now` as a parameter


class FakeClock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> float:
        self.t += dt
        return self.t


def tenant(name: str = "t", **kw: Any) -> Tenant:
    return Tenant.from_config(TenantConfig(name=name, keys=[f"sk-{name}"], **kw))
