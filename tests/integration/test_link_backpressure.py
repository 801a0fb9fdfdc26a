"""The TCP link when the sidecar stops reading it: submits beyond `link.max_outgoing` are
refused with a 503 (not queued forever), and a sidecar that has not taken the gateway's writes
for `heartbeat_timeout_s` loses its link although its heartbeats keep coming.

The sidecar here is real (its gRPC Info, its engine), but the TCP link it announces is served
by `DeafLink`: a small real server that sends the sidecar's own announcement and load reports
and never reads a byte of what the gateway writes."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import Future

import httpx
import msgspec
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import wire

from engine_sidecar import convert
from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.server import Sidecar
from tests.integration.cluster import Cluster
from tests.integration.poll import until

_DOWN = msgspec.msgpack.Encoder()
PROMPT = "x" * 400_000  # a few of these fill the socket buffers between gateway and sidecar


class DeafLink:
    """Serves `sidecar`'s TCP link: announces it, sends a load report every `interval_s`,
    reads nothing (its receive window is small, so the gateway's writes back up)."""

    def __init__(self, sidecar: Sidecar, interval_s: float = 0.1) -> None:
        self.sidecar = sidecar
        self.interval_s = interval_s
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._conns: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def start(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited when accepted
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._serve, sock=sock)
        self.sidecar.servicer.link_port = self.port  # what the sidecar's Info announces

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._conns.values():
            writer.close()  # each connection's loop ends at its next load report
        if self._conns:
            await asyncio.wait(list(self._conns), timeout=5.0)

    def _load(self, seq: int) -> bytes:
        report = pb.LoadReport()
        convert.fill_load(report, seq, self.sidecar.backend.load(), held=0)
        return report.SerializeToString()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns[task] = writer
        self.connections += 1
        info = self.sidecar.servicer.info_reply().SerializeToString()
        try:
            writer.write(wire.frame(_DOWN.encode(wire.Down(info=info, load=self._load(0)))))
            seq = 1
            while not writer.is_closing():
                await asyncio.sleep(self.interval_s)
                writer.write(wire.frame(_DOWN.encode(wire.Down(load=self._load(seq)))))
                seq += 1
        except OSError:
            pass  # the gateway dropped the connection
        finally:
            self._conns.pop(task, None)
            writer.close()


@contextlib.contextmanager
def deaf_cluster(gateway_yaml: str) -> Iterator[tuple[Cluster, DeafLink]]:
    """One real sim sidecar whose TCP link is a `DeafLink`."""
    deafs: list[DeafLink] = []

    async def deafen(sidecars: list[Sidecar]) -> None:
        deafs.append(DeafLink(sidecars[0]))
        await deafs[0].start()

    sim = SimConfig(model="sim-llama", profile="fast")
    c = Cluster(gateway_yaml, [{"sim": sim, "heartbeat_interval_s": 0.1}], before_gateway=deafen)
    c.start()
    try:
        yield c, deafs[0]
    finally:
        if deafs:
            c.run(deafs[0].stop())
        c.stop()


def post_all(c: Cluster, n: int) -> list[httpx.Response]:
    """`n` concurrent requests with large prompts; their responses (all of them end)."""
    out: list[httpx.Response] = []
    body = {"model": "sim-llama", "prompt": PROMPT, "max_tokens": 4}

    def one() -> None:
        out.append(httpx.post(f"{c.http_url}/v1/completions", json=body, timeout=60))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(out) == n, "a request did not end"
    return out


def test_submits_beyond_max_outgoing_are_refused_with_a_503() -> None:
    gateway = (
        "gateway: {first_token_timeout_s: 3, link: {max_outgoing: 2, heartbeat_timeout_s: 60}}"
    )
    with deaf_cluster(gateway) as (c, deaf):
        # (enough that the kernel's send buffer, which may grow to a few MiB, cannot take all)
        responses = post_all(c, 24)
        refused = [r for r in responses if r.status_code == 503]
        assert refused, [r.status_code for r in responses]
        assert all(r.json()["error"]["type"] == "service_unavailable" for r in refused)
        # The ones that were queued did not wait forever: their first-output limit ended them.
        assert {r.status_code for r in responses} <= {503, 504}
        assert deaf.connections == 1  # the link itself stayed up


def test_a_sidecar_that_stops_reading_loses_its_link() -> None:
    gateway = (
        "gateway: {first_token_timeout_s: 20, request_timeout_s: 30, "
        "link: {heartbeat_timeout_s: 1.0}}"
    )
    with deaf_cluster(gateway) as (c, deaf):
        assert c.gateway is not None
        result: Future[list[httpx.Response]] = Future()
        sender = threading.Thread(target=lambda: result.set_result(post_all(c, 12)))
        sender.start()
        # Heartbeats keep coming; only the writes the sidecar does not take end the link,
        # and the gateway connects again.
        until(lambda: deaf.connections >= 2, 20.0, "the gateway dropped the deaf link")
        sender.join(60)
        assert all(r.status_code != 200 for r in result.result(0))
