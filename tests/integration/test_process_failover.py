"""Failover when a sidecar's process really dies: sim sidecars run as their own processes,
started with `shardgate up`'s command line, and one is SIGKILLed under load. Its engine dies
with it (nothing keeps streaming in the background); every stream still completes, with the
text of an undisturbed run and no error."""

from __future__ import annotations

import contextlib
import functools
import logging
import re
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
from gateway.procs import child_env
from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SIM: dict[str, Any] = {"backend": "sim", "sim": {"model": "sim-llama", "profile": "fast"}}
STREAMS = 6
TOKENS = 1000


def up_or_exited(proc: subprocess.Popen[bytes], address: str) -> bool:
    if proc.poll() is not None:
        return True
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", int(address.rpartition(":")[2]))) == 0


@contextlib.contextmanager
def sidecar_processes(
    n: int, log_dir: Path, launch: dict[str, Any] = SIM
) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """`n` sim sidecars, each its own process, by address; killed and reaped at the end."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for i in range(n):
            address = f"127.0.0.1:{free_port()}"
            e = SidecarEndpoint(name=f"proc-{i}", address=address, launch=launch)
            with (log_dir / f"proc-{i}.log").open("wb") as log:
                procs[address] = subprocess.Popen(
                    sidecar_argv(e, "WARNING"),
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=child_env(),
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


CUT = 150  # the sidecar process exits once its engine has generated this many tokens


def test_a_stop_string_across_a_crash_stops_at_the_right_place(
    cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The stop string spans the tokens around the cut: its start was generated (and held
    back) by the sidecar that died, its end by the one the request migrated to."""
    prompt = "Somewhere a stop string waits."
    body: dict[str, Any] = {
        "model": "sim-llama",
        "prompt": prompt,
        "max_tokens": 400,
        "extra_body": {"ignore_eos": True},
    }
    # The undisturbed text, token by token (one chunk per token), from the in-process cluster's
    # sim sidecars (same model and seed: the same tokens).
    with openai.OpenAI(base_url=f"{cluster.http_url}/v1", api_key="x", max_retries=0) as client:
        tokens = [
            c.choices[0].text
            for c in client.completions.create(**body, stream=True)
            if c.choices and c.choices[0].text
        ]
    assert len(tokens) == 400
    text = "".join(tokens)
    offset = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens) + 1)]
    start, end = offset[CUT - 8], offset[CUT + 8]
    stop = text[start:end]
    assert text.find(stop) == start  # the first place it occurs

    crashing = {**SIM, "sim": {**SIM["sim"], "faults": {"crash_after_tokens": CUT}}}
    with sidecar_processes(2, tmp_path, crashing) as procs:
        names = [(f"proc-{i}", address) for i, address in enumerate(procs)]
        c = Cluster("models: [sim-llama]", [], external=names)
        c.start(60.0)
        caplog.set_level(logging.WARNING, logger="gateway.runtime.supervisor")
        try:
            with openai.OpenAI(base_url=f"{c.http_url}/v1", api_key="x", max_retries=0) as client:
                stream = client.completions.create(**body, stop=[stop], stream=True)
                pieces, finish = [], None
                for chunk in stream:
                    if chunk.choices and chunk.choices[0].text:
                        pieces.append(chunk.choices[0].text)
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finish = chunk.choices[0].finish_reason
            assert finish == "stop"
            assert "".join(pieces) == text[:start]
            exits = [p.poll() for p in procs.values()]
            assert exits.count(None) == 1 and exits.count(17) == 1  # one crashed, one serves
            # Where the request was cut: within the stop string.
            moved = [
                int(m.group(1))
                for r in caplog.records
                if (m := re.search(r"after (\d+) tokens; migrated", r.getMessage()))
            ]
            assert len(moved) == 1
            assert CUT - 8 < moved[0] < CUT + 8, moved
        finally:
            c.stop()
