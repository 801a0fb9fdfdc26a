from __future__ import annotations

import random

import pytest

from engine_sidecar.backends.sim.kv import BlockManager


def ids(n: int, start: int = 0) -> list[int]:
    return [start + i for i in range(n)]


def state(kv: BlockManager) -> tuple[int, int, float, int, int]:
    return (kv.num_used, kv.num_cached_idle, kv.usage(), kv.queried_tokens, kv.hit_tokens)


@pytest.mark.parametrize("caching", [True, False])
def test_usage_rises_and_free_returns_blocks(caching: bool) -> None:
    kv = BlockManager(num_blocks=10, block_size=4, enable_caching=caching)
    assert kv.allocate_prompt(1, ids(10)) == 0  # 3 blocks
    assert kv.num_used == 3 and kv.usage() == pytest.approx(0.3)
    assert kv.append_slot(1, 12)  # still 3 blocks
    assert kv.num_used == 3
    assert kv.append_slot(1, 13)  # a 4th
    assert kv.num_used == 4 and kv.capacity(1) == 16
    kv.check()
    kv.free(1)
    kv.check()
    assert kv.num_used == 0 and kv.usage() == 0.0
    # The 2 full prompt blocks stay cached (idle) with caching on; all blocks are free again.
    assert kv.num_cached_idle == (2 if caching else 0)
    assert kv.num_available == 10
    kv.free(1)  # unknown: ignored


@pytest.mark.parametrize("caching", [True, False])
def test_allocation_failure_changes_nothing(caching: bool) -> None:
    kv = BlockManager(num_blocks=4, block_size=4, enable_caching=caching)
    assert kv.allocate_prompt(1, ids(12)) is not None  # 3 blocks
    before = state(kv)
    assert kv.allocate_prompt(2, ids(8, 100)) is None  # needs 2, 1 left
    assert state(kv) == before and 2 not in kv
    assert kv.append_slot(1, 16)  # the last block
    before = state(kv)
    assert not kv.append_slot(1, 17)
    assert state(kv) == before and kv.capacity(1) == 16
    kv.check()


def test_prefix_cache_hits_and_sharing() -> None:
    kv = BlockManager(num_blocks=20, block_size=4)
    prompt = ids(10)  # 2 full blocks + 2 tokens
    assert kv.allocate_prompt(1, prompt) == 0
    assert kv.num_used == 3
    # Same prefix, different tail: the 2 full blocks are shared, not allocated again.
    assert kv.allocate_prompt(2, [*prompt[:8], 99, 98, 97]) == 8
    assert kv.num_used == 3 + 1
    assert kv.prefix_hit_rate() == pytest.approx(8 / 21)
    kv.check()
    kv.free(1)
    assert kv.num_used == 4 - 1  # shared blocks still held by 2
    kv.free(2)
    assert kv.num_used == 0 and kv.num_cached_idle == 2
    # Idle cached blocks still hit.
    assert kv.allocate_prompt(3, prompt) == 8
    assert kv.num_cached_idle == 0 and kv.num_used == 3
    kv.check()


def test_the_last_prompt_token_is_always_computed() -> None:
    kv = BlockManager(num_blocks=20, block_size=4)
    assert kv.allocate_prompt(1, ids(8)) == 0
    assert kv.cached_tokens(8, kv.block_hashes(ids(8))) == 4
    assert kv.allocate_prompt(2, ids(8)) == 4  # block 2 is shared, but token 8 is recomputed
    assert kv.num_used == 2
    kv.check()


def test_salt_separates_caches() -> None:
    kv = BlockManager(num_blocks=20, block_size=4)
    a = kv.block_hashes(ids(8))
    assert a == kv.block_hashes(ids(8)) and len(a) == 2
    assert a != kv.block_hashes(ids(8), b"lora-x")
    assert kv.block_hashes(ids(3)) == []


def test_caching_disabled_shares_nothing() -> None:
    kv = BlockManager(num_blocks=20, block_size=4, enable_caching=False)
    assert kv.allocate_prompt(1, ids(10)) == 0
    assert kv.allocate_prompt(2, ids(10)) == 0
    assert kv.num_used == 6 and kv.prefix_hit_rate() == 0.0


def test_idle_blocks_are_evicted_lru_when_needed() -> None:
    kv = BlockManager(num_blocks=6, block_size=4)
    kv.allocate_prompt(1, ids(9))  # blocks A1 A2 + partial
    kv.free(1)
    kv.allocate_prompt(2, ids(9, 100))  # B1 B2 + partial
    kv.free(2)
    assert kv.num_cached_idle == 4 and kv.num_free == 2
    # 5 blocks: 2 free + 3 evicted (A's first, oldest; then B's tail block first).
    assert kv.allocate_prompt(3, ids(20, 500)) == 0
    assert kv.evictions == 3 and kv.num_cached_idle == 1
    kv.check()
    kv.free(3)
    assert kv.allocate_prompt(4, ids(9, 100)) == 4  # B1 survived: heads outlive tails
    kv.check()


def test_invariants_hold_under_random_operations() -> None:
    rng = random.Random(7)
    kv = BlockManager(num_blocks=64, block_size=4)
    lens: dict[int, int] = {}
    prefixes = [ids(24, 1000 * i) for i in range(4)]
    for key in range(2000):
        op = rng.random()
        if op < 0.4:
            prompt = [*rng.choice(prefixes)[: rng.randint(1, 24)], *ids(rng.randint(0, 9), key)]
            before = state(kv)
            hit = kv.allocate_prompt(key, prompt, lookahead=1)
            if hit is None:
                assert state(kv) == before
            else:
                assert 0 <= hit < len(prompt) and hit % 4 == 0
                lens[key] = len(prompt) + 1
        elif op < 0.8 and lens:
            k = rng.choice(list(lens))
            if kv.append_slot(k, lens[k] + 1):
                lens[k] += 1
        elif lens:
            kv.free(lens.popitem()[0] if rng.random() < 0.5 else rng.choice(list(lens)))
            lens = {k: v for k, v in lens.items() if k in kv}
        kv.check()
        assert kv.num_used + kv.num_cached_idle <= kv.num_blocks
        assert 0.0 <= kv.usage() <= 1.0
    assert kv.hit_tokens > 0


def test_the_cache_says_what_it_stored_and_evicted_as_the_gateway_names_them() -> None:
    from shardgate.v1.kvblocks import block_names, start

    from gateway.policy.routing.kv_index import KvIndex

    kv = BlockManager(num_blocks=4, block_size=4, model="sim-llama", events=True)
    prompt = ids(9)  # 2 full blocks + a partial one
    assert kv.allocate_prompt(1, prompt) == 0
    named = block_names(prompt, 4, start("sim-llama"))
    assert kv.take_events() == [(n, True) for n in named]
    assert kv.take_events() == []
    index = KvIndex()
    index.stored("sim-a", named)
    assert index.matched(block_names([*prompt, 50, 51, 52], 4, start("sim-llama")), 0) == {
        "sim-a": 2
    }
    kv.free(1)
    assert kv.allocate_prompt(2, ids(16, start=100)) == 0  # needs the idle blocks' room
    events = kv.take_events()
    removed = [n for n, s in events if not s]
    assert removed == named[::-1]  # (the earlier prompt's, its tail idle first)
    assert [n for n, s in events if s] == block_names(ids(16, start=100), 4, start("sim-llama"))
    assert [s for _, s in events] == [False] * len(removed) + [True] * (len(events) - len(removed))
    index.removed("sim-a", removed)
    assert index.matched(named, 0) == {}
    kv.check()


def test_a_lora_adapter_names_its_blocks_apart() -> None:
    kv = BlockManager(num_blocks=8, block_size=4, model="m")
    assert set(kv.block_hashes(ids(8))).isdisjoint(kv.block_hashes(ids(8), b"sql"))


def test_without_events_nothing_is_recorded() -> None:
    kv = BlockManager(num_blocks=8, block_size=4)
    kv.allocate_prompt(1, ids(8))
    assert kv.take_events() == []
