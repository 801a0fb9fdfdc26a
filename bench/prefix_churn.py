"""The prefix index under churn, with glibc's mmap threshold moving and fixed: RSS as it goes.

One new block hash after another into a `PrefixIndex` of the gateway's capacity (W2 adds one
unique hash a request), each variant in a process of its own (the threshold is per process);
the RSS every `--every` hashes. With glibc's own threshold, the index's rebuilt tables move onto
the heap once a freed one has raised it, and the heap keeps two; with the gateway's fixed
threshold (`gateway.malloc_mmap_threshold_bytes`) they stay mappings.

    .venv/bin/python -m bench.prefix_churn --hashes 1200000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys

from bench.cpu import rss_kib
from gateway.allocator import fix_mmap_threshold
from gateway.policy.routing.prefix import PrefixIndex


def churn(hashes: int, every: int, capacity: int, threshold: int | None) -> list[int]:
    """RSS (KiB) before and after every `every` new hashes."""
    fixed = fix_mmap_threshold(threshold)
    if threshold is not None and not fixed:
        raise SystemExit("this C library does not take an mmap threshold")
    index = PrefixIndex(capacity)
    rng = random.Random(0)
    me = os.getpid()
    out = [rss_kib(me)]
    for i in range(1, hashes + 1):
        index.record((rng.getrandbits(64),), "sim-a")
        if i % every == 0:
            out.append(rss_kib(me))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hashes", type=int, default=1_200_000)
    p.add_argument("--every", type=int, default=100_000)
    p.add_argument("--capacity", type=int, default=100_000)
    p.add_argument("--threshold", help="(one variant, in this process): bytes, or 'glibc'")
    a = p.parse_args()
    if a.threshold is not None:
        size = None if a.threshold == "glibc" else int(a.threshold)
        print(json.dumps(churn(a.hashes, a.every, a.capacity, size)))
        return
    print(f"RSS (MiB) every {a.every:,} new hashes, capacity {a.capacity:,}")
    for label, threshold in (("glibc's own threshold", "glibc"), ("fixed at 1 MiB", "1048576")):
        argv = [sys.executable, "-m", "bench.prefix_churn", "--threshold", threshold]
        argv += ["--hashes", str(a.hashes), "--every", str(a.every), "--capacity", str(a.capacity)]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{label}: {done.stderr.strip()}")
        kib = json.loads(done.stdout)
        print(f"{label:>22}: " + " ".join(f"{k / 1024:.0f}" for k in kib))


if __name__ == "__main__":
    main()
