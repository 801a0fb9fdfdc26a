"""Failover when a sidecar's process really dies: sim sidecars run as their own processes,
started with `shardgate up`'s command line, and one is SIGKILLed under load. Its engine dies
with it (nothing keeps streaming in the background); every stream still completes, with the
text of an undisturbed run and no error."""

from __future__ import annotations

import contextlib
import functools
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.cluster import sidecar_argv
from gateway.config.schema import SidecarEndpoint
from gateway.procs import die_with_parent
from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.integration.test_up import free_port

ROOT = Path(__file__).resolve().parents[2]
SIM = {"backend": "sim", "sim": {"model": "sim-llama", "profile": "fast"}}
STREAMS = 6
TOKENS = 1000


def up_or_exited(proc: subprocess.Popen[bytes], address: str) -> bool:
    if proc.poll() is not None:
        return True
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", int(address.rpartition(":")[2]))) == 0


@contextlib.contextmanager
def sidecar_processes(n: int, log_dir: Path) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """`n` sim sidecars, each its own process, by address; killed and reaped at the end."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for i in range(n):
            address = f"127.0.0.1:{free_port()}"
            e = SidecarEndpoint(name=f"proc-{i}", address=address, launch=SIM)
            with (log_dir / f"proc-{i}.log").open("wb") as log:
                procs[address] = subprocess.Popen(
                    sidecar_argv(e, "WARNING"),
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=die_with_parent,
                )
        for address, p in procs.items():
            until(functools.partial(up_or_exited, p, address), 60.0, f"{address} listens")
            assert p.poll() is None, f"the sidecar on {address} exited: see {log_dir}"
        yield procs
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(10)


@dataclass
class Stream:
    prompt: str
    replica: str = ""
    pieces: list[str] = field(default_factory=list)
    finish: str | None = None
    error: BaseException | None = None


def request(prompt: str) -> dict[str, Any]:
    return {
        "model": "sim-llama",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": TOKENS,
        "extra_body": {"ignore_eos": True},
    }


def run_stream(client: openai.OpenAI, s: Stream) -> None:
    try:
        raw = client.chat.completions.with_raw_response.create(**request(s.prompt), stream=True)
        s.replica = raw.headers["x-shardgate-replica"]
        for chunk in raw.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                s.pieces.append(chunk.choices[0].delta.content)
            if chunk.choices and chunk.choices[0].finish_reason:
                s.finish = chunk.choices[0].finish_reason
    except BaseException as e:  # reported by the test, never lost with the thread
        s.error = e


@pytest.mark.parametrize("transport", ["auto", "grpc"])
def test_sigkill_of_a_sidecar_process_under_load_loses_nothing(
    transport: str, tmp_path: Path
) -> None:
    with sidecar_processes(3, tmp_path) as procs:
        gateway = (
            f"gateway: {{default_max_tokens: 64, link: {{transport: {transport}}}}}\n"
            "models: [sim-llama]"
        )
        names = [(f"proc-{i}", address) for i, address in enumerate(procs)]
        c = Cluster(gateway, [], external=names)
        c.start(60.0)
        try:
            with openai.OpenAI(
                base_url=f"{c.http_url}/v1", api_key="none", max_retries=0, timeout=60
            ) as client:
                prompts = [f"Stream number {i}, please keep going." for i in range(STREAMS)]
                reference = {
                    p: client.chat.completions.create(**request(p)).choices[0].message.content
                    for p in prompts
                }
                streams = [Stream(p) for p in prompts]
                threads = [threading.Thread(target=run_stream, args=(client, s)) for s in streams]
                for t in threads:
                    t.start()
                until(
                    lambda: all(len(s.pieces) >= 50 or s.error for s in streams),
                    60.0,
                    "every stream is under way",
                )
                on: dict[str, int] = {}
                for s in streams:
                    on[s.replica] = on.get(s.replica, 0) + 1
                victim = max(on, key=lambda a: on[a])
                assert all(len(s.pieces) < TOKENS for s in streams if s.replica == victim)
                procs[victim].send_signal(signal.SIGKILL)
                assert procs[victim].wait(10) == -signal.SIGKILL
                for t in threads:
                    t.join(60)
                assert not any(t.is_alive() for t in threads)
            for s in streams:
                assert s.error is None, f"{s.prompt}: {s.error!r}"
                assert s.finish == "length"
                assert len(s.pieces) == TOKENS
                assert "".join(s.pieces) == reference[s.prompt]
            assert c.gateway is not None
            assert c.gateway.supervisor.migrations >= on[victim]
        finally:
            c.stop()
