from __future__ import annotations

import aiohttp

from engine_sidecar.backend import LoadSnapshot
from engine_sidecar.metrics import SidecarMetrics
from tests.unit.observability._scrape import parse, value


async def test_serves_vllm_names_read_at_scrape_time() -> None:
    snap = [LoadSnapshot(running=0, waiting=0, kv_usage=0.0, max_num_seqs=8, ready=False)]
    calls = []

    def load() -> LoadSnapshot:
        calls.append(1)
        return snap[0]

    links, inflight = [2], [5]
    metrics = SidecarMetrics(
        load, "sim-llama", links=lambda: links[0], inflight=lambda: inflight[0]
    )
    assert calls == []  # nothing is read until a scrape
    port = await metrics.start("127.0.0.1", 0)
    try:
        assert port > 0
        snap[0] = LoadSnapshot(
            running=3,
            waiting=4,
            kv_usage=0.93,
            max_num_seqs=8,
            ready=True,
            preemptions=7,
            prefix_hit_rate=0.5,
            generated_tokens=1234,
        )
        links[0], inflight[0] = 1, 9
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/metrics") as resp,
        ):
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain")
            s = parse(await resp.read())
    finally:
        await metrics.stop()
    m = {"model_name": "sim-llama"}
    assert value(s, "vllm:num_requests_running", **m) == 3
    assert value(s, "vllm:num_requests_waiting", **m) == 4
    assert value(s, "vllm:kv_cache_usage_perc", **m) == 0.93
    assert value(s, "vllm:prefix_cache_hit_rate", **m) == 0.5
    assert value(s, "vllm:num_preemptions_total", **m) == 7
    assert value(s, "vllm:generation_tokens_total", **m) == 1234
    assert value(s, "shardgate_sidecar_ready") == 1
    assert value(s, "shardgate_sidecar_max_num_seqs") == 8
    assert value(s, "shardgate_sidecar_links") == 1
    assert value(s, "shardgate_sidecar_inflight") == 9
    assert len(calls) == 1


async def test_link_counts_are_optional_and_stop_is_idempotent() -> None:
    metrics = SidecarMetrics(
        lambda: LoadSnapshot(running=1, waiting=0, kv_usage=0.1, max_num_seqs=4, ready=True),
        "m",
    )
    s = parse(metrics.render()[0])
    assert value(s, "vllm:num_requests_running", model_name="m") == 1
    assert not any(name.startswith("shardgate_sidecar_links") for name, _ in s)
    await metrics.stop()
    await metrics.start("127.0.0.1", 0)
    await metrics.stop()
    await metrics.stop()


def test_the_kv_cache_series_are_there_only_while_the_backend_reports_its_cache() -> None:
    from engine_sidecar.kv_mirror import KvMirror

    mirror: list[KvMirror | None] = [None]
    metrics = SidecarMetrics(
        lambda: LoadSnapshot(running=0, waiting=0, kv_usage=0.0, max_num_seqs=4, ready=True),
        "m",
        kv=lambda: mirror[0],
    )
    s = parse(metrics.render()[0])
    assert not any(name.startswith("shardgate_sidecar_kv") for name, _ in s)
    m = mirror[0] = KvMirror(16)
    m.stored([1, 2, 3])
    m.cleared()
    m.stored([4])
    m.gaps = 1
    s = parse(metrics.render()[0])
    assert value(s, "shardgate_sidecar_kv_blocks") == 1
    assert value(s, "shardgate_sidecar_kv_clears_total") == 1
    assert value(s, "shardgate_sidecar_kv_replay_gaps_total") == 1
    assert value(s, "shardgate_sidecar_kv_resyncs_total") == 0
