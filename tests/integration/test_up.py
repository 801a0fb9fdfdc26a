"""`shardgate up --config configs/local.yaml`: the command behind `make run`, as a user runs it."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
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
