"""Key names. A tenant's keys share one Redis Cluster hash tag (`{t:<tenant>}`), a model pool's
another (`{m:<model>}`), so that each script call touches one slot. Braces and `%` in names are
percent-escaped, so that a name can neither end its tag early nor collide with another."""

from __future__ import annotations


def _escape(name: str) -> str:
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def tenant_keys(prefix: str, tenant: str, model: str) -> tuple[str, str, str]:
    """requests TAT, tokens TAT, concurrency leases of `tenant` on `model`."""
    base = f"{prefix}:{{t:{_escape(tenant)}}}:{_escape(model)}"
    return f"{base}:rq", f"{base}:tk", f"{base}:cc"


def pool_keys(prefix: str, model: str) -> tuple[str, str, str]:
    base = f"{prefix}:{{m:{_escape(model)}}}"
    return f"{base}:rq", f"{base}:tk", f"{base}:cc"


def instances_key(prefix: str) -> str:
    return f"{prefix}:{{instances}}"
