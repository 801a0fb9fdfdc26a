"""The engines' KV index: memory per cached block, events applied per second, and what naming a
prompt's blocks and matching them cost per request.

A fleet of `--replicas` engines, each storing the blocks of `--groups` long shared prefixes
(llm-d's workload shape: groups that share a prefix of `--prefix-tokens`, then a suffix of
their own per request), until the index holds `--blocks` names; then requests of those groups
are named and matched. Memory is what tracemalloc sees the index allocate (the Python objects
it holds), per name and per (replica, name) pair.

    .venv/bin/python -m bench.kv_index
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc

from shardgate.v1.kvblocks import block_names, start

from gateway.policy.routing.kv_index import KvIndex


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--blocks", type=int, default=500_000, help="names stored in all")
    p.add_argument("--holders", type=int, default=2, help="replicas that store each name")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--groups", type=int, default=150)
    p.add_argument("--prefix-tokens", type=int, default=6000)
    p.add_argument("--suffix-tokens", type=int, default=1200)
    p.add_argument("--requests", type=int, default=2000)
    a = p.parse_args()
    rng = random.Random(0)
    replicas = [f"r{i}" for i in range(a.replicas)]

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kv = KvIndex(max_blocks=a.blocks)
    batch = 64  # (names per BlockStored event, as an engine step stores a few dozen)
    t0 = time.perf_counter()
    stored = 0
    while stored < a.blocks:
        names = [rng.getrandbits(64) for _ in range(batch)]
        for r in rng.sample(replicas, a.holders):
            kv.stored(r, names)
        stored += batch
    applied_s = time.perf_counter() - t0
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    pairs = stored * a.holders
    print(f"index: {stored:,} names on {a.replicas} replicas, {a.holders} holders each")
    print(f"  memory: {held / stored:.0f} B per name, {held / pairs:.0f} B per (replica, name)")
    print(f"  stored: {pairs / applied_s / 1e6:.2f} M (replica, name) per s ({batch} per event)")

    # The groups' prefixes, each cached on one replica, in the same index.
    prefixes = [[rng.randrange(1, 32000) for _ in range(a.prefix_tokens)] for _ in range(a.groups)]
    seed = start("model")
    for g, tokens in enumerate(prefixes):
        kv.stored(replicas[g % a.replicas], block_names(tokens, a.block_size, seed))
    requests = [
        prefixes[rng.randrange(a.groups)]
        + [rng.randrange(1, 32000) for _ in range(a.suffix_tokens)]
        for _ in range(a.requests)
    ]
    t0 = time.perf_counter()
    named = [block_names(tokens, a.block_size, seed) for tokens in requests]
    t1 = time.perf_counter()
    hits = 0
    for names in named:
        hits += max(kv.matched(names, now=0.0).values(), default=0)
    t2 = time.perf_counter()
    blocks = (a.prefix_tokens + a.suffix_tokens) // a.block_size
    print(
        f"per request ({a.prefix_tokens:,}+{a.suffix_tokens:,} tokens, {blocks} blocks of "
        f"{a.block_size}):"
    )
    print(f"  naming its blocks: {(t1 - t0) / a.requests * 1e6:.0f} µs")
    print(f"  matching them: {(t2 - t1) / a.requests * 1e6:.0f} µs")
    print(f"  best run matched: {hits / a.requests:.0f} blocks on average")


if __name__ == "__main__":
    main()
