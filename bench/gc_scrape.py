"""The gateway's collector pauses over the measured window, from two scrapes of /metrics.

`shardgate_gc_pause_seconds` is a histogram per generation: the window's pauses are the
difference of the two scrapes; its p99 is the upper bound of the bucket that holds it (the
buckets are 20 µs .. 1 s). The longest pause is the gateway's since start-up.
"""

from __future__ import annotations

import math

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from bench.launch import get_text

PAUSE = "shardgate_gc_pause_seconds"
PAUSE_MAX = "shardgate_gc_pause_max_seconds"
CPU = "shardgate_gc_cpu_seconds"

# generation -> (bucket upper bounds -> cumulative count, sum of seconds, max seconds, CPU s)
Scrape = dict[str, tuple[dict[float, float], float, float, float]]


class GcGeneration(msgspec.Struct, frozen=True, kw_only=True):
    generation: str
    count: int
    total_ms: float
    cpu_ms: float
    p99_ms_at_most: float  # the upper bound of the 99th percentile's bucket (over 1 s: the max)
    max_ms_since_start: float


class GcPauses(msgspec.Struct, frozen=True, kw_only=True):
    count: int
    total_ms: float
    cpu_ms: float
    generations: list[GcGeneration]


def parse(text: str) -> Scrape:
    out: Scrape = {}
    for family in text_string_to_metric_families(text):
        if family.name not in (PAUSE, PAUSE_MAX, CPU):
            continue
        for s in family.samples:
            g = s.labels.get("generation", "")
            buckets, total, longest, cpu = out.get(g, ({}, 0.0, 0.0, 0.0))
            if s.name == PAUSE + "_bucket":
                buckets[float(s.labels["le"])] = s.value
            elif s.name == PAUSE + "_sum":
                total = s.value
            elif s.name == PAUSE_MAX:
                longest = s.value
            elif s.name == CPU + "_total":
                cpu = s.value
            out[g] = (buckets, total, longest, cpu)
    return out


def _p99(buckets: dict[float, float]) -> float:
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return 0.0
    want = 0.99 * buckets[bounds[-1]]
    return next(b for b in bounds if buckets[b] >= want)


def window(before: Scrape, after: Scrape) -> GcPauses:
    gens = []
    for g in sorted(after):
        b_after, sum_after, longest, cpu_after = after[g]
        b_before, sum_before, _, cpu_before = before.get(g, ({}, 0.0, 0.0, 0.0))
        diff = {le: n - b_before.get(le, 0.0) for le, n in b_after.items()}
        count = int(diff.get(math.inf, 0.0))
        p99 = _p99(diff)
        gens.append(
            GcGeneration(
                generation=g,
                count=count,
                total_ms=(sum_after - sum_before) * 1000,
                cpu_ms=(cpu_after - cpu_before) * 1000,
                p99_ms_at_most=(p99 if math.isfinite(p99) else longest) * 1000,
                max_ms_since_start=longest * 1000,
            )
        )
    return GcPauses(
        count=sum(x.count for x in gens),
        total_ms=sum(x.total_ms for x in gens),
        cpu_ms=sum(x.cpu_ms for x in gens),
        generations=gens,
    )


async def scrape(host: str, port: int, timeout_s: float = 10.0) -> Scrape | None:
    """None: the target serves no such metric (not a gateway, or an older one)."""
    status, text = await get_text(host, port, "/metrics", timeout_s)
    if status != 200:
        return None
    found = parse(text)
    return found or None
