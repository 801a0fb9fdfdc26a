"""The collector-pause metric: timed with a fake clock, rendered, merged; and the real
collector feeds it once installed (and stops feeding it once uninstalled)."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from bench import gc_scrape
from gateway.observability.gc_pauses import GcPauses
from gateway.observability.merge import merge, parse
from tests.unit.observability._scrape import parse as series
from tests.unit.observability._scrape import value


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def collection(p: GcPauses, clock: Clock, cpu: Clock, generation: int, took_s: float) -> None:
    p("start", {"generation": generation, "collected": 0, "uncollectable": 0})
    clock.now += took_s
    cpu.now += took_s / 2  # half of it running, half waiting for the CPU
    p("stop", {"generation": generation, "collected": 3, "uncollectable": 0})


def exposition(p: GcPauses) -> bytes:
    r = CollectorRegistry()
    r.register(p)
    return generate_latest(r)


def test_each_collection_is_one_pause_of_its_generation() -> None:
    clock, cpu = Clock(), Clock()
    p = GcPauses(clock, cpu)
    for took in (0.00001, 0.00003, 0.004):
        collection(p, clock, cpu, 0, took)
    collection(p, clock, cpu, 2, 0.150)
    s = series(exposition(p))
    assert value(s, "shardgate_gc_pause_seconds_count", generation="0") == 3
    assert value(s, "shardgate_gc_pause_seconds_bucket", generation="0", le="2e-05") == 1
    assert value(s, "shardgate_gc_pause_seconds_bucket", generation="0", le="5e-05") == 2
    assert value(s, "shardgate_gc_pause_seconds_bucket", generation="0", le="0.005") == 3
    assert value(s, "shardgate_gc_pause_seconds_count", generation="1") == 0
    assert value(s, "shardgate_gc_pause_seconds_count", generation="2") == 1
    assert value(s, "shardgate_gc_pause_max_seconds", generation="0") == 0.004
    assert value(s, "shardgate_gc_pause_max_seconds", generation="2") == 0.150
    assert abs(value(s, "shardgate_gc_cpu_seconds_total", generation="2") - 0.075) < 1e-9
    assert value(s, "shardgate_gc_collected_objects_total", generation="0") == 9
    assert p.count == 4


def test_workers_merge_to_the_longest_pause_and_the_total_count() -> None:
    clocks = [(Clock(), Clock()), (Clock(), Clock())]
    a, b = (GcPauses(*c) for c in clocks)
    collection(a, *clocks[0], 2, 0.010)
    collection(b, *clocks[1], 2, 0.300)
    collection(b, *clocks[1], 2, 0.020)
    s = series(merge([parse(exposition(a).decode()), parse(exposition(b).decode())]))
    assert value(s, "shardgate_gc_pause_max_seconds", generation="2") == 0.300
    assert value(s, "shardgate_gc_pause_seconds_count", generation="2") == 3


def test_the_bench_reads_a_window_of_pauses() -> None:
    clock, cpu = Clock(), Clock()
    p = GcPauses(clock, cpu)
    collection(p, clock, cpu, 0, 0.5)  # before the window: not counted in it
    before = gc_scrape.parse(exposition(p).decode())
    for _ in range(99):
        collection(p, clock, cpu, 0, 0.00003)
    collection(p, clock, cpu, 0, 0.003)
    w = gc_scrape.window(before, gc_scrape.parse(exposition(p).decode()))
    (g0,) = (g for g in w.generations if g.generation == "0")
    assert w.count == g0.count == 100
    assert g0.p99_ms_at_most == 0.05  # 99 of 100 are within the 50 µs bucket
    assert abs(g0.total_ms - (99 * 0.03 + 3.0)) < 1e-6
    assert g0.max_ms_since_start == 500.0


def test_installed_it_times_real_collections_until_uninstalled() -> None:
    p = GcPauses()
    p.install()
    p.install()  # once only
    try:
        gc.collect()
        assert p.count == 1
        assert p.max_s[2] > 0
    finally:
        p.uninstall()
    gc.collect()
    assert p.count == 1
    assert p not in gc.callbacks
