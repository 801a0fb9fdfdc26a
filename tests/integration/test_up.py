"""`shardgate up --config configs/local.yaml`: the command behind `make run`, as a user runs it."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_up_serves_and_stops_cleanly_with_its_children(sig: signal.Signals) -> None:
    http_port, grpc_port = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway",
            "up",
            "--config",
            str(ROOT / "configs/local.yaml"),
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(grpc_port),
            "--log-level",
            "WARNING",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        banner = b""
        deadline = time.monotonic() + 60
        while b"shardgate is up" not in banner and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                line = proc.stdout.readline()
                if not line:
                    break
                banner += line
        assert b"shardgate is up" in banner, banner.decode(errors="replace")
        assert f"127.0.0.1:{http_port}/v1".encode() in banner

        sidecars = children_of(proc.pid)
        assert len(sidecars) == 2

        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{http_port}/v1", api_key="none", max_retries=0
        )
        r = client.chat.completions.create(
            model="sim-llama", messages=[{"role": "user", "content": "hi"}], max_tokens=8
        )
        assert r.choices[0].message.content

        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while any(alive(p) for p in sidecars) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(p) for p in sidecars)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_sighup_reloads_and_sigterm_lets_a_running_stream_finish(tmp_path: Path) -> None:
    http_port, grpc_port, a, b = (free_port() for _ in range(4))
    sim = "{backend: sim, sim: {model: sim-llama, profile: fast}}"
    base = (
        f"gateway: {{http: {{port: {http_port}}}, grpc: {{port: {grpc_port}}}, "
        "default_max_tokens: 16, watch_config: false}\n"
        "sidecars:\n"
        f"  - {{name: a, address: '127.0.0.1:{a}', launch: {sim}}}\n"
        f"  - {{name: b, address: '127.0.0.1:{b}', launch: {sim}}}\n"
    )
    config = tmp_path / "gw.yaml"
    config.write_text(base)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "up", "--config", str(config), "--log-level", "ERROR"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        assert b"shardgate is up" in proc.stdout.readline()
        url = f"http://127.0.0.1:{http_port}"

        def version() -> int:
            with urllib.request.urlopen(f"{url}/admin/config", timeout=10) as resp:
                return int(json.loads(resp.read())["version"])

        config.write_text(base.replace("16", "5"))
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while version() != 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)

        with openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as api:
            stream = api.completions.create(
                model="sim-llama",
                prompt="go",
                max_tokens=600,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            got = 0
            for chunk in stream:
                if chunk.choices and chunk.choices[0].text:
                    got += 1
                if got == 10:
                    proc.send_signal(signal.SIGTERM)  # drain: the stream must still finish
            assert got == 600
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_workers_share_the_ports_and_stop_together(tmp_path: Path) -> None:
    http_port, grpc_port, a = (free_port() for _ in range(3))
    config = tmp_path / "gw.yaml"
    config.write_text(
        f"gateway: {{http: {{port: {http_port}}}, grpc: {{port: {grpc_port}}}}}\n"
        "sidecars:\n"
        f"  - {{name: a, address: '127.0.0.1:{a}', "
        "launch: {backend: sim, sim: {model: sim-llama, profile: fast}}}\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "gateway", "up", "--config", str(config),
            "--workers", "2", "--log-level", "ERROR",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert b"shardgate is up" in proc.stdout.readline()
        children = children_of(proc.pid)
        assert len(children) == 3  # one sidecar, two gateway workers
        with openai.OpenAI(
            base_url=f"http://127.0.0.1:{http_port}/v1", api_key="x", max_retries=0
        ) as api:
            for _ in range(20):
                r = api.completions.create(model="sim-llama", prompt="hi", max_tokens=3)
                assert r.choices[0].text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        deadline = time.monotonic() + 10
        while any(alive(p) for p in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(p) for p in children)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
