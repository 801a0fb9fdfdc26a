"""`shardgate up --workers 2`: one /metrics scrape has every worker's totals, and a reload
reaches every worker and keeps the tenants' buckets as drained as they were."""

from __future__ import annotations

import json
import signal
import socket
import urllib.error
import urllib.request
from pathlib import Path

from tests.integration.poll import until
from tests.integration.test_up import children_of, shardgate_up
from tests.ports import free_port
from tests.unit.observability._scrape import Series, parse, value

SIM = "{backend: sim, sim: {model: sim-llama, profile: fast}}"


def config_text(http: int, grpc: int, sidecar: int, extra: str = "") -> str:
    return (
        f"gateway: {{http: {{port: {http}}}, grpc: {{port: {grpc}}}, watch_config: false, "
        "default_max_tokens: 4}\n"
        f"sidecars:\n  - {{name: a, address: '127.0.0.1:{sidecar}', launch: {SIM}}}\n{extra}"
    )


def complete(url: str, key: str | None = None) -> int:
    """One completion on a new connection (so the kernel picks a worker for each)."""
    body = json.dumps({"model": "sim-llama", "prompt": "hi", "max_tokens": 2}).encode()
    headers = {"Content-Type": "application/json", "Connection": "close"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(f"{url}/v1/completions", body, headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as e:
        with e:
            return int(e.code)


def scrape(url: str) -> Series:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        return parse(resp.read())


def worker_scrape(path: Path) -> Series:
    """One worker's own exposition, from its socket in the workers' runtime directory."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(path))
        s.sendall(b"GET /metrics HTTP/1.0\r\nHost: worker\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.split(b" ", 2)[1] == b"200", head
    return parse(body)


def runtime_dir(parent: int) -> Path:
    for pid in children_of(parent):
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"--runtime-dir" in args:
            return Path(args[args.index(b"--runtime-dir") + 1].decode())
    raise AssertionError("no gateway worker with a runtime directory")


def workers_seen(s: Series) -> float:
    """How many workers the scrape merged (each reports its config hash once)."""
    return sum(v for (name, _), v in s.items() if name == "shardgate_config_info")


def all_serving(url: str) -> bool:
    s = scrape(url)
    states = [v for (name, _), v in s.items() if name == "shardgate_replica_state"]
    return workers_seen(s) == 2 and states == [2]  # the worst view of both workers: up


def finished(s: Series) -> float:
    return sum(
        v
        for (name, labels), v in s.items()
        if name == "shardgate_requests_total" and ("outcome", "rejected") not in labels
    )


def test_one_scrape_counts_every_workers_requests_and_an_admin_reload_reaches_all(
    tmp_path: Path,
) -> None:
    http, grpc, sidecar = free_port(), free_port(), free_port()
    config = tmp_path / "gw.yaml"
    config.write_text(config_text(http, grpc, sidecar))
    url = f"http://127.0.0.1:{http}"
    with shardgate_up("--config", str(config), "--workers", "2", "--log-level", "ERROR") as proc:
        assert proc.stdout is not None
        assert b"shardgate is up" in proc.stdout.readline()
        until(lambda: all_serving(url), 20.0)
        sockets = [runtime_dir(proc.pid) / f"worker-{i}.sock" for i in range(2)]

        statuses = [complete(url) for _ in range(20)]
        assert statuses == [200] * 20
        each = [finished(worker_scrape(p)) for p in sockets]
        assert sum(each) == 20
        assert min(each) > 0  # the kernel spread them over both workers
        assert finished(scrape(url)) == 20  # whichever worker answers the scrape

        edited = config_text(http, grpc, sidecar).replace("max_tokens: 4", "max_tokens: 5")
        config.write_text(edited)
        req = urllib.request.Request(f"{url}/admin/reload", method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.loads(resp.read())["version"] == 2
        version = "shardgate_config_version"
        until(lambda: all(value(worker_scrape(p), version) == 2 for p in sockets), 20.0)
        assert value(scrape(url), version) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert not sockets[0].parent.exists()


def test_a_reload_keeps_each_workers_share_and_its_drained_buckets(tmp_path: Path) -> None:
    """Burst 4 over 2 workers, (almost) no refill: at most 4 of 24 admitted in all, however
    the requests fall, before and after an edit that does not touch the tenant."""
    http, grpc, sidecar = free_port(), free_port(), free_port()
    tenant = "tenants:\n  - {name: t, keys: [k], requests_per_s: 0.001, requests_burst: 4}\n"
    text = config_text(http, grpc, sidecar, tenant)
    config = tmp_path / "gw.yaml"
    config.write_text(text)
    url = f"http://127.0.0.1:{http}"
    with shardgate_up("--config", str(config), "--workers", "2", "--log-level", "ERROR") as proc:
        assert proc.stdout is not None
        assert b"shardgate is up" in proc.stdout.readline()
        until(lambda: all_serving(url), 20.0)

        before = [complete(url, "k") for _ in range(12)]
        assert set(before) <= {200, 429}
        assert 1 <= before.count(200) <= 4

        config.write_text(text.replace("default_max_tokens: 4", "default_max_tokens: 5"))
        proc.send_signal(signal.SIGHUP)  # the parent sends it on to every worker

        def reloaded() -> bool:
            s = scrape(url)
            return workers_seen(s) == 2 and value(s, "shardgate_config_version") == 2

        until(reloaded, 20.0)
        after = [complete(url, "k") for _ in range(12)]
        assert set(after) <= {200, 429}
        assert after.count(200) == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
