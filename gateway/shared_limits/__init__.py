"""Tenants' and model pools' limits shared in Redis by every worker and gateway instance.

GCRA buckets (one key each, a theoretical arrival time) and concurrency leases, changed only by
the Lua scripts in `lua`; `store` runs them (one round trip, a deadline, never cancelled
mid-reply); `admission` is the `Admitter` the service calls, with a local fallback while Redis
is away (`gateway/policy/breaker.py`, `gateway/policy/split.py`).
"""
