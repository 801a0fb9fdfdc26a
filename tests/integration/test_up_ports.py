"""`shardgate up` and its ports: a busy one is named before anything starts, and
`--port-offset` moves all of a local cluster's together so that a second runs beside the first."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import openai
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.integration.test_up import ROOT, shardgate_up
from tests.ports import free_port

OFFSET = 7


class Ports:
    """A cluster's ports, each free at itself and at itself + OFFSET."""

    def __init__(self) -> None:
        self.http, self.grpc, self.sidecar, self.link, self.metrics, self.outside = (
            free_port(also_free_at=OFFSET) for _ in range(6)
        )


def cluster_yaml(p: Ports, outside: bool = False) -> str:
    """A gateway and one launched sim sidecar with every port fixed; with `outside`, a
    second sidecar that runs elsewhere (not launched) on `p.outside`."""
    sim = "backend: sim, sim: {model: sim-llama, profile: fast}"
    text = (
        f"gateway: {{http: {{port: {p.http}}}, grpc: {{port: {p.grpc}}}, watch_config: false}}\n"
        "sidecars:\n"
        f"  - {{name: a, address: '127.0.0.1:{p.sidecar}', "
        f"launch: {{{sim}, link_port: {p.link}, metrics_port: {p.metrics}}}}}\n"
    )
    if outside:
        text += f"  - {{name: b, address: '127.0.0.1:{p.outside}'}}\n"
    return text


@contextlib.contextmanager
def listening(port: int) -> Iterator[socket.socket]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        yield s


def up_refused(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "up", *args, "--log-level", "INFO"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_one_line(done: subprocess.CompletedProcess[str], line: str) -> None:
    assert done.returncode not in (0, None)
    assert "Traceback" not in done.stderr
    assert [x for x in done.stderr.splitlines() if x.strip()] == [f"shardgate: {line}"]
    assert "shardgate is up" not in done.stdout


@pytest.mark.parametrize(
    ("busy", "named"),
    [
        ("http", "gateway.http.port; --http-port or --port-offset moves it"),
        ("grpc", "gateway.grpc.port; --grpc-port or --port-offset moves it"),
        ("sidecar", "sidecars[0].address; --port-offset moves it"),
        ("link", "sidecars[0].launch.link_port; --port-offset moves it"),
        ("metrics", "sidecars[0].launch.metrics_port; --port-offset moves it"),
    ],
)
def test_a_busy_port_is_named_in_one_line(busy: str, named: str, tmp_path: Path) -> None:
    p = Ports()
    config = tmp_path / "gw.yaml"
    config.write_text(cluster_yaml(p))
    port = getattr(p, busy)
    with listening(port):
        done = up_refused("--config", str(config))
    assert_one_line(done, f"port {port} is in use ({named})")


@pytest.mark.parametrize(("flag", "busy"), [("--http-port", "http"), ("--grpc-port", "grpc")])
def test_shardgate_gateway_names_a_busy_port_in_one_line(
    flag: str, busy: str, tmp_path: Path
) -> None:
    """`shardgate gateway` (the gateway alone) checks its own ports, not its sidecars'."""
    p = Ports()
    port = getattr(p, busy)
    config = tmp_path / "gw.yaml"
    config.write_text(cluster_yaml(p))
    ports = ["--http-port", str(p.http), "--grpc-port", str(p.grpc)]
    with listening(p.sidecar), listening(port):  # (a running sidecar's port is no conflict)
        done = subprocess.run(
            [sys.executable, "-m", "gateway", "gateway", "--config", str(config), *ports],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert_one_line(done, f"port {port} is in use ({flag})")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def serves(http_port: int) -> None:
    with openai.OpenAI(
        base_url=f"http://127.0.0.1:{http_port}/v1", api_key="none", max_retries=0
    ) as client:
        for _ in range(4):  # (over both sidecars)
            r = client.completions.create(model="sim-llama", prompt="hi", max_tokens=3)
            assert r.choices[0].text


def grpc_serving(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_second_up_is_refused_then_runs_beside_the_first_with_port_offset(
    tmp_path: Path,
) -> None:
    p = Ports()
    config = tmp_path / "gw.yaml"
    config.write_text(cluster_yaml(p, outside=True))
    sim = ["--model", "sim-llama", "--profile", "fast", "--log-level", "WARNING"]
    outside = subprocess.Popen(
        [sys.executable, "-m", "engine_sidecar", "--name", "b", "--port", str(p.outside), *sim],
        cwd=ROOT,
    )
    try:
        with shardgate_up("--config", str(config), "--log-level", "WARNING") as first:
            assert first.stdout is not None
            assert b"shardgate is up" in first.stdout.readline()

            done = up_refused("--config", str(config))
            line = "gateway.http.port; --http-port or --port-offset moves it"
            assert_one_line(done, f"port {p.http} is in use ({line})")

            moved = ("--port-offset", str(OFFSET))
            with shardgate_up("--config", str(config), *moved, "--log-level", "WARNING") as second:
                assert second.stdout is not None
                banner = second.stdout.readline()
                assert f"127.0.0.1:{p.http + OFFSET}/v1".encode() in banner, banner
                assert f"gRPC at 127.0.0.1:{p.grpc + OFFSET}".encode() in banner
                serves(p.http + OFFSET)
                assert grpc_serving(p.grpc + OFFSET)
                for port in (p.sidecar, p.link, p.metrics):
                    assert accepts(port + OFFSET)
                metrics = f"http://127.0.0.1:{p.metrics + OFFSET}/metrics"
                with urllib.request.urlopen(metrics, timeout=10) as resp:
                    assert resp.status == 200
                admin = f"http://127.0.0.1:{p.http + OFFSET}/admin"
                shown = get_json(f"{admin}/config")["config"]["sidecars"]
                assert [s["address"] for s in shown] == [
                    f"127.0.0.1:{p.sidecar + OFFSET}",
                    f"127.0.0.1:{p.outside}",  # not launched: where it runs
                ]
                # A reload reads the file's ports moved the same way: it applies.
                config.write_text(cluster_yaml(p, outside=True) + "models: [sim-llama]\n")
                req = urllib.request.Request(f"{admin}/reload", method="POST")
                with urllib.request.urlopen(req, timeout=10) as resp:
                    assert json.loads(resp.read())["version"] == 2
                serves(p.http + OFFSET)
                serves(p.http)  # the first goes on as it was
    finally:
        outside.terminate()
        outside.wait(30)
