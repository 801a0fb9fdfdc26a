"""The keyring over a real SQLite store: what a change of a key keeps of requests in flight."""

from __future__ import annotations

import hashlib
from pathlib import Path

from gateway.config.pricing import ModelPrice, Pricing
from gateway.config.store import StoreConfig
from gateway.policy.grants import admit
from gateway.runtime.keyring import Keyring
from gateway.store.records import KeyRecord
from gateway.store.sql import open_store

PRICING = Pricing(models={"m": ModelPrice(prompt_per_1k_usd=1000.0, completion_per_1k_usd=0.0)})


async def test_a_budget_changed_while_a_request_runs_lets_its_reserve_go(tmp_path: Path) -> None:
    ring = Keyring(open_store(f"sqlite:///{tmp_path}/s.db"), StoreConfig(poll_s=60))
    await ring.start()
    try:
        token = hashlib.sha256(b"sk-k").hexdigest()
        await ring.store.insert("keys", KeyRecord(token=token, key_name="k", max_budget=10.0))
        await ring.refresh()
        grant = ring.lookup(bytes.fromhex(token))
        assert grant is not None
        charge = admit(grant, "m", 5, 4.0, 0.0, 0.0)
        await ring.store.update("keys", token, {"max_budget": 20.0, "rpm_limit": 5})
        await ring.refresh()
        now = ring.lookup(bytes.fromhex(token))
        assert now is not None and now.own is grant.own  # changed in place
        assert now.own.budget.limit == 20.0 and now.own.requests is not None
        ring.record(charge, "r1", "anonymous", "m", (3, 0, 0), "ok", PRICING, 0.0)
        assert now.own.budget.reserved == 0 and now.own.budget.spent == 3.0
        assert await ring.ledger.flushed()
        await ring.refresh()
        assert ring.keys[token].spend == 3.0 and now.own.budget.spent == 3.0
    finally:
        await ring.close()
