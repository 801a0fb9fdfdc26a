"""The bench against a real local cluster: every request sent is verified and counted."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bench import cli, floor, proxy_floor, report
from bench.cpu import CpuSampler
from bench.grpc_target import EngineTarget, GatewayTarget
from bench.link_target import LinkTarget
from bench.openai_target import OpenAITarget
from bench.plan import Plan
from bench.runner import run_phase
from bench.scenario import Scenario
from tests.integration.cluster import Cluster
from tests.ports import free_port, free_ports

MAX_TOKENS = 12


def scenario(**kw: Any) -> Scenario:
    base: dict[str, Any] = {
        "name": "t",
        "requests": 20,
        "concurrency": 5,
        "prompt_tokens": 16,
        "output_tokens": MAX_TOKENS,
        "request_timeout_s": 30.0,
    }
    return msgspec.convert({**base, **kw}, Scenario)


async def run(target: Any, sc: Scenario) -> report.Report:
    plan = Plan(sc)
    sampler = CpuSampler([], children=False)
    sampler.start()
    try:
        results = await run_phase(
            target, plan.measured, mode=sc.mode, concurrency=sc.concurrency, duration_s=60.0
        )
    finally:
        await target.close()
    sampler.stop()
    tgt = report.Target(api=sc.api, address=target.address)
    return report.build(plan, tgt, [], results, 1.0, sampler, dt.datetime.now(dt.UTC))


def assert_all_verified(r: report.Report, n: int) -> None:
    assert r.errors == {}
    assert (r.requests.sent, r.requests.ok, r.requests.failed) == (n, n, 0)
    assert r.requests.output_tokens == n * MAX_TOKENS
    assert r.latency.ttft_ms.count == n
    assert r.latency.itl_ms.count == n * (MAX_TOKENS - 1)
    assert r.requests.prompt_tokens >= n * 16


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
async def test_http_closed_loop_verifies_every_stream(cluster: Cluster, endpoint: str) -> None:
    sc = scenario(endpoint=endpoint)
    assert_all_verified(await run(OpenAITarget(cluster.http_url, sc), sc), 20)


async def test_http_open_loop_with_classes(cluster: Cluster) -> None:
    classes = [
        {"name": "hi", "priority": 5, "api_key": "sk-hi", "weight": 1},
        {"name": "lo", "priority": 0, "api_key": "sk-lo", "weight": 1},
    ]
    sc = scenario(mode="open", rate_rps=400.0, concurrency=64, classes=classes)
    r = await run(OpenAITarget(cluster.http_url + "/v1", sc), sc)
    assert_all_verified(r, 20)
    assert sum(c.requests.ok for c in r.classes) == 20


async def test_grpc_verifies_every_stream(cluster: Cluster) -> None:
    sc = scenario(api="grpc", classes=[{"name": "a", "priority": 1, "api_key": "sk-a"}])
    assert_all_verified(await run(GatewayTarget(cluster.grpc_target, sc), sc), 20)


async def test_link_direct_verifies_every_stream(cluster: Cluster) -> None:
    sc = scenario(api="link")
    target = LinkTarget(cluster.sidecar_targets()[0], sc)
    assert_all_verified(await run(target, sc), 20)


async def test_the_http_floor_streams_pass_the_bench_checks() -> None:
    runner, port = await floor.start(0, MAX_TOKENS)
    try:
        sc = scenario()
        assert_all_verified(await run(OpenAITarget(f"http://127.0.0.1:{port}", sc), sc), 20)
    finally:
        await runner.cleanup()


async def test_the_proxy_floor_streams_pass_the_bench_checks(cluster: Cluster) -> None:
    proxy = await proxy_floor.start(cluster.sidecar_targets()[0], 0)
    try:
        sc = scenario(concurrency=8)
        assert_all_verified(await run(OpenAITarget(f"http://127.0.0.1:{proxy.port}", sc), sc), 20)
    finally:
        await proxy.close()


async def test_engine_direct_verifies_every_stream(cluster: Cluster) -> None:
    sc = scenario(api="engine")
    target = EngineTarget(cluster.sidecar_targets()[0], sc)
    assert_all_verified(await run(target, sc), 20)


@pytest.mark.parametrize("api", ["http", "grpc"])
async def test_gateway_errors_are_counted_by_kind_with_a_sample(cluster: Cluster, api: str) -> None:
    sc = scenario(model="no-such-model", requests=3, concurrency=1, api=api)
    target = (
        OpenAITarget(cluster.http_url, sc)
        if api == "http"
        else GatewayTarget(cluster.grpc_target, sc)
    )
    r = await run(target, sc)
    kind = "http_404" if api == "http" else "grpc_not_found"
    assert r.errors == {kind: 3}
    assert "no-such-model" in r.error_samples[kind][0]


async def test_refused_connections_are_counted_not_raised() -> None:
    port = free_port()  # nothing listens there
    sc = scenario(requests=3, concurrency=1, connect_timeout_s=2.0)
    r = await run(OpenAITarget(f"http://127.0.0.1:{port}", sc), sc)
    assert r.errors == {"connect": 3}
    assert r.requests.failed == 3


def test_cli_starts_a_gateway_from_a_config_and_reports(tmp_path: Path) -> None:
    http, grpc_, a, b = free_ports(4)
    sidecar = "launch: {backend: sim, sim: {model: sim-llama, profile: instant}}"
    config = tmp_path / "bench.yaml"
    config.write_text(
        f"gateway:\n  http: {{port: {http}}}\n  grpc: {{port: {grpc_}}}\nsidecars:\n"
        f"  - {{name: a, address: '127.0.0.1:{a}', {sidecar}}}\n"
        f"  - {{name: b, address: '127.0.0.1:{b}', {sidecar}}}\n"
    )
    out = tmp_path / "out"
    argv = ["--config", str(config), "--scenario", "W2", "--requests", "30", "--warmup", "4"]
    argv += ["--concurrency", "6", "--max-tokens", str(MAX_TOKENS), "--out", str(out)]
    assert cli.main([*argv, "--quiet", "--no-progress"]) == 0
    data = json.loads((out / "report.json").read_text())
    assert data["requests"]["sent"] == data["requests"]["ok"] == 30
    assert data["requests"]["output_tokens"] == 30 * MAX_TOKENS
    assert data["warmup"]["ok"] == 4
    assert data["errors"] == {}
    gateway, *sidecars = data["cpu"]["processes"]
    assert "up --config" in gateway["cmdline"]
    assert len(sidecars) == 2
    assert all("engine_sidecar" in s["cmdline"] for s in sidecars)
    assert gateway["rss_end_kib"] > 0
    memory = data["memory"]  # the gateway's RSS through the run
    assert memory["pid"] == gateway["pid"]
    assert memory["streams"] == 6
    assert memory["rss_peak_kib"] >= max(memory["rss_before_kib"], memory["rss_after_kib"]) > 0
    assert memory["bytes_per_stream"] == pytest.approx(
        (memory["rss_peak_kib"] - memory["rss_before_kib"]) * 1024 / 6
    )
    pauses = data["gc"]  # its collector over the window, from /metrics
    assert [g["generation"] for g in pauses["generations"]] == ["0", "1", "2"]
    assert pauses["count"] == sum(g["count"] for g in pauses["generations"])
    assert (out / "latency_cdf.png").stat().st_size > 0
    assert (out / "ttft_over_time.png").stat().st_size > 0
    rep = report.read(out / "report.json")
    assert cli.main(["compare", str(out / "report.json"), str(out / "report.json")]) == 0
    assert rep.scenario.concurrency == 6
