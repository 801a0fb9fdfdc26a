"""Percentiles, the report's JSON schema, and `bench compare`."""

from __future__ import annotations

import datetime as dt
import json
import math
from array import array
from pathlib import Path

import pytest

from bench import compare, report
from bench.cpu import CpuSampler
from bench.plan import Plan
from bench.result import Result
from bench.scenario import Scenario, TrafficClass
from bench.stats import dist_ms, percentile


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1.0], 50, 1.0),
        ([1.0, 2.0], 50, 1.5),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 100, 5.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 90, 4.6),
        ([float(i) for i in range(1, 101)], 99, 99.01),
    ],
)
def test_percentile_interpolates_between_ranks(
    values: list[float], q: float, expected: float
) -> None:
    assert math.isclose(percentile(values, q), expected)


def test_percentile_of_nothing_and_out_of_range() -> None:
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_dist_is_in_milliseconds_and_skips_nan() -> None:
    d = dist_ms([0.001, 0.002, math.nan, 0.003])
    assert (d.count, d.p50, d.max) == (3, 2.0, 3.0)
    assert math.isclose(d.mean, 2.0)
    assert dist_ms([]).count == 0


SCENARIO = Scenario(
    name="t",
    requests=4,
    classes=[TrafficClass(name="hi", priority=5, weight=1), TrafficClass(name="lo", weight=1)],
)


def results(ttft_s: float) -> list[Result]:
    out = []
    for i in range(4):
        itls = array("d", [0.001] * 31)
        out.append(Result(i, i % 2, 10.0 + i, 10.5 + i, ttft_s, 32, 60, itls))
    out.append(Result.failed(4, 1, 14.0, 14.1, "http_503", "http_503: queue full"))
    return out


def build(ttft_s: float) -> report.Report:
    return report.build(
        Plan(SCENARIO),
        report.Target(api="http", address="127.0.0.1:1"),
        [],
        results(ttft_s),
        2.0,
        CpuSampler([], children=False),
        dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    )


def test_report_counts_and_latencies() -> None:
    r = build(0.01)
    assert (r.requests.sent, r.requests.ok, r.requests.failed) == (5, 4, 1)
    assert r.requests.output_tokens == 128
    assert r.throughput.requests_per_s == 2.0
    assert r.throughput.output_tokens_per_s == 64.0
    assert r.latency.ttft_ms.p50 == 10.0
    assert r.latency.itl_ms.count == 4 * 31
    assert r.latency.e2e_ms.p99 == 500.0
    assert r.errors == {"http_503": 1}
    assert [c.name for c in r.classes] == ["hi", "lo"]
    assert [c.requests.sent for c in r.classes] == [2, 3]
    assert r.classes[1].errors == {"http_503": 1}
    assert r.error_samples == {"http_503": ["queue full"]}


def test_report_json_schema_round_trips(tmp_path: Path) -> None:
    r = build(0.01)
    path = tmp_path / "report.json"
    report.write(r, path)
    data = json.loads(path.read_text())
    assert data["schema"] == "shardgate.bench/v1"
    assert set(data) >= {
        "started_at", "duration_s", "target", "scenario", "warmup", "requests",
        "throughput", "latency", "errors", "classes", "cpu",
    }  # fmt: skip
    assert set(data["latency"]) == {"ttft_ms", "itl_ms", "e2e_ms"}
    assert set(data["latency"]["ttft_ms"]) == {"count", "mean", "p50", "p90", "p99", "max"}
    assert set(data["cpu"]) == {"client", "processes"}
    assert data["scenario"]["name"] == "t"
    assert report.read(path) == r


def test_reading_something_else_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"schema": 1}')
    with pytest.raises(ValueError, match="not a bench report"):
        report.read(path)


def test_compare_prints_both_runs_side_by_side() -> None:
    text = compare.side_by_side(build(0.010), build(0.020), "a.json", "b.json")
    line = next(x for x in text.splitlines() if x.strip().startswith("TTFT p50"))
    assert line.split()[2:5] == ["10.0", "20.0", "+100.0%"]
    assert line.rstrip().endswith("worse  (ms)")
    assert "[hi] requests/s" in text
    assert "errors: http_503" in text
    same = next(x for x in text.splitlines() if x.strip().startswith("requests sent"))
    assert same.split()[2:5] == ["5", "5", "="]


def test_summary_names_the_scenario_and_figures() -> None:
    text = compare.summary(build(0.01))
    assert text.startswith("t: http chat closed loop, concurrency 1, 5 requests")
    assert "output tokens/s" in text
    assert text.endswith("e.g. http_503: queue full")
