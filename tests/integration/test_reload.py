"""Transactional hot reload: edits apply live, bad files change nothing, sidecars come and go."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster

BASE = """
gateway: {default_max_tokens: 16, drain_timeout_s: 20}
models: [sim-llama, sim-small]
fallbacks: {sim-llama: sim-small}
"""
LONG: dict[str, Any] = {
    "model": "sim-llama",
    "messages": [{"role": "user", "content": "A long one."}],
    "max_tokens": 400,
    "extra_body": {"ignore_eos": True},
}


def start(tmp_path: Path, base: str) -> Cluster:
    llama = SimConfig(model="sim-llama", profile="fast")
    small = SimConfig(model="sim-small", profile="fast")
    # sim-0 and sim-1 serve sim-llama; sim-2 (sim-small) is not in the config at first.
    c = Cluster(
        base, [{"sim": llama}, {"sim": llama}, {"sim": small}], tmp_path / "gw.yaml", [0, 1]
    )
    c.start()
    return c


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = start(tmp_path, BASE)
    yield c
    c.stop()


@pytest.fixture
def unwatched(tmp_path: Path) -> Iterator[Cluster]:
    """The file is not watched: only the admin call reloads it, once per call."""
    c = start(
        tmp_path, BASE.replace("drain_timeout_s: 20", "drain_timeout_s: 20, watch_config: false")
    )
    yield c
    c.stop()


def reload_failures(c: Cluster) -> float:
    with urllib.request.urlopen(f"{c.http_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    [value] = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "shardgate_config_reload_failures_total"
    ]
    return value


def admin(c: Cluster, method: str, path: str) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(f"{c.http_url}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.loads(e.read())


def write(c: Cluster, text: str) -> None:
    """Replace the file in one step, so that a watcher never reads half of it."""
    assert c.config_path is not None
    tmp = c.config_path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(c.config_path)


def eventually(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def stream_in_background(c: Cluster, api: openai.OpenAI) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        raw = api.chat.completions.with_raw_response.create(**LONG, stream=True)
        out["replica"] = raw.headers["x-shardgate-replica"]
        pieces = []
        for chunk in raw.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
                started.set()
        out["n"] = len(pieces)

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(20)
    return t, out


def test_a_valid_edit_applies_without_dropping_a_running_stream(cluster: Cluster) -> None:
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="x", max_retries=0) as api:
        t, out = stream_in_background(cluster, api)
        write(cluster, cluster.config_text(BASE.replace("16", "5"), [0, 1]))
        status, body = admin(cluster, "POST", "/admin/reload")
        assert (status, body["ok"], body["version"]) == (200, True, 2)
        t.join(30)
        assert out["n"] == 400  # not cut
        r = api.completions.create(model="sim-llama", prompt="hi", extra_body={"ignore_eos": True})
        assert r.usage is not None and r.usage.completion_tokens == 5  # the new default


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        ("gateway: {default_max_tokens: [\n", "not valid YAML"),
        ("gateway: {default_max_tokens: 16}\nbogus_field: 1\n", "bogus_field"),
        ("gateway: {default_max_tokens: -3}\n", "default_max_tokens"),
        ("models: [sim-llama]\nfallbacks: {sim-llama: sim-nothing}\n", "sim-nothing"),
        ("gateway: {http: {port: 1}}\n", "restart"),
        ("gateway: {max_headers: 10}\n", "max_headers changes only with a restart"),
        ("gateway: {lean_http: false}\n", "lean_http changes only with a restart"),
        (
            "gateway: {malloc_mmap_threshold_bytes: null}\n",
            "malloc_mmap_threshold_bytes changes only with a restart",
        ),
    ],
)
def test_an_invalid_edit_changes_nothing_and_says_why(
    unwatched: Cluster, edit: str, named: str
) -> None:
    c = unwatched
    _, before = admin(c, "GET", "/admin/config")
    assert reload_failures(c) == 0
    write(c, edit + c.config_text("", [0, 1]))
    status, body = admin(c, "POST", "/admin/reload")
    assert status == 400 and body["ok"] is False
    assert named in body["error"]
    _, after = admin(c, "GET", "/admin/config")
    assert after["config"] == before["config"]
    assert after["version"] == before["version"]
    assert named in after["last_error"]
    assert reload_failures(c) == 1
    assert admin(c, "POST", "/admin/reload")[0] == 400  # refused again, counted again
    assert reload_failures(c) == 2


def test_the_error_names_the_line(cluster: Cluster) -> None:
    write(cluster, "gateway:\n  default_max_tokens: 16\n  keepalive_s: -1\n")
    _, body = admin(cluster, "POST", "/admin/reload")
    assert ":3:" in body["error"] and "keepalive_s" in body["error"]


def test_the_file_is_watched(cluster: Cluster) -> None:
    write(cluster, cluster.config_text(BASE.replace("16", "7"), [0, 1]))
    eventually(lambda: admin(cluster, "GET", "/admin/config")[1]["version"] == 2, 10)
    assert admin(cluster, "GET", "/admin/config")[1]["config"]["gateway"]["default_max_tokens"] == 7


def test_sidecars_are_added_and_drained_live(cluster: Cluster) -> None:
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="x", max_retries=0) as api:
        assert [m.id for m in api.models.list()] == ["sim-llama"]
        write(cluster, cluster.config_text(BASE, [0, 1, 2]))
        assert admin(cluster, "POST", "/admin/reload")[0] == 200
        eventually(lambda: "sim-small" in [m.id for m in api.models.list()])
        # Remove the sidecar a running stream is on: the stream finishes (drain).
        t, out = stream_in_background(cluster, api)
        on = out["replica"]
        keep = [i for i in (0, 1) if f"127.0.0.1:{cluster.sidecars[i].port}" != on]
        write(cluster, cluster.config_text(BASE, [*keep, 2]))
        assert admin(cluster, "POST", "/admin/reload")[0] == 200
        for _ in range(10):
            r = api.chat.completions.with_raw_response.create(
                model="sim-llama", messages=LONG["messages"], max_tokens=2
            )
            assert r.headers["x-shardgate-replica"] != on
        t.join(30)
        assert out["n"] == 400


def test_fallback_and_readiness(cluster: Cluster) -> None:
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="x", max_retries=0) as api:
        write(cluster, cluster.config_text(BASE, [0, 1, 2]))
        assert admin(cluster, "POST", "/admin/reload")[0] == 200
        eventually(lambda: admin(cluster, "GET", "/readyz")[0] == 200)
        assert cluster.gateway is not None
        fleet = cluster.gateway.fleet
        # (the fallback's replica is linked: readiness speaks of sim-llama's only)
        eventually(lambda: any(r.routable for r in fleet.pool("sim-small")))
        # sim-llama loses every replica: readiness drops and sim-small serves it.
        write(cluster, cluster.config_text(BASE, [2]))
        assert admin(cluster, "POST", "/admin/reload")[0] == 200
        eventually(lambda: admin(cluster, "GET", "/readyz")[0] == 503)
        r = api.chat.completions.create(model="sim-llama", messages=LONG["messages"], max_tokens=3)
        assert r.model == "sim-small"
        write(cluster, cluster.config_text(BASE, [0, 2]))
        assert admin(cluster, "POST", "/admin/reload")[0] == 200
        eventually(lambda: admin(cluster, "GET", "/readyz")[0] == 200)
        r = api.chat.completions.create(model="sim-llama", messages=LONG["messages"], max_tokens=3)
        assert r.model == "sim-llama"


def metric_labels(c: Cluster, name: str) -> set[str]:
    with urllib.request.urlopen(f"{c.http_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        s.labels["replica"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_a_removed_sidecar_leaves_the_replica_metrics(cluster: Cluster) -> None:
    removed = f"127.0.0.1:{cluster.sidecars[1].port}"
    eventually(lambda: removed in metric_labels(cluster, "shardgate_replica_state"))
    assert "sim-1" in metric_labels(cluster, "shardgate_ejections_total")
    write(cluster, cluster.config_text(BASE, [0]))
    assert admin(cluster, "POST", "/admin/reload")[0] == 200
    eventually(lambda: removed not in metric_labels(cluster, "shardgate_replica_state"))
    assert "sim-1" not in metric_labels(cluster, "shardgate_ejections_total")


def file_hash(c: Cluster) -> str:
    assert c.config_path is not None
    return hashlib.sha256(c.config_path.read_bytes()).hexdigest()[:16]


def metric_hashes(c: Cluster) -> list[str]:
    with urllib.request.urlopen(f"{c.http_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return [
        s.labels["hash"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "shardgate_config_info"
    ]


def test_admin_config_and_the_metric_show_the_files_hash(unwatched: Cluster) -> None:
    c = unwatched
    started = file_hash(c)
    assert admin(c, "GET", "/admin/config")[1]["hash"] == started
    assert metric_hashes(c) == [started]
    write(c, c.config_text(BASE.replace("16", "5"), [0, 1]))
    status, body = admin(c, "POST", "/admin/reload")
    assert (status, body["version"]) == (200, 2)
    edited = file_hash(c)
    assert edited != started
    assert body["hash"] == admin(c, "GET", "/admin/config")[1]["hash"] == edited
    assert metric_hashes(c) == [edited]


def test_a_good_reload_clears_the_error_of_a_refused_one(unwatched: Cluster) -> None:
    c = unwatched
    good = c.config_text(BASE.replace("16", "5"), [0, 1])
    for text in (good, good):  # an edit that applies, then the file in force again (unchanged)
        write(c, "gateway: {default_max_tokens: -3}\n" + c.config_text("", [0, 1]))
        assert admin(c, "POST", "/admin/reload")[0] == 400
        assert "default_max_tokens" in admin(c, "GET", "/admin/config")[1]["last_error"]
        write(c, text)
        assert admin(c, "POST", "/admin/reload")[0] == 200
        _, after = admin(c, "GET", "/admin/config")
        assert (after["last_error"], after["last_error_at"]) == (None, None)
        assert (after["version"], after["hash"]) == (2, file_hash(c))
