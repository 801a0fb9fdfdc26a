"""Memory per open stream stays bounded, and streams leave nothing behind.

2,000 streams at once through the real gateway (HTTP edge, scheduler, TCP link), from a
client process to a sim sidecar process, over loopback sockets; the gateway runs here, under
tracemalloc. With every stream open and streaming, what the gateway holds per stream stays
under a generous ceiling; once the client has dropped them all (the abort path) and 2,000
more have run to their end, what is still held per stream stays under a small one, and none of
it waited for the cyclic collector: a request's state is freed when it ends, not at a
collection that, with the gateway's thresholds and frozen heap, may come much later. A
per-stream blow-up, a leak of any request's state or a reference cycle in it fails; nothing
here is timed."""

from __future__ import annotations

import asyncio
import collections
import gc
import sys
import tracemalloc
from pathlib import Path
from typing import Any

from gateway.app import Gateway
from gateway.config.loader import parse
from tests.integration.poll import until_async
from tests.integration.test_process_failover import ROOT, sidecar_processes

STREAMS = 2000
# What one open stream may hold in the gateway (about 20 KiB here).
CEILING_PER_STREAM = 64 * 1024
# What may be left per stream once all have ended (about 250 bytes here, first-use caches
# included: the baseline is taken before the first request).
LEFT_PER_STREAM = 1024
LONG_TOKENS = 4000  # the streams that are dropped: they would outlast the test
SHORT_TOKENS = 4
# One token every 500 ms: the first streams are still open when the last has started.
SIM: dict[str, Any] = {
    "backend": "sim",
    "sim": {
        "model": "sim-llama",
        "max_num_seqs": 4096,
        "max_num_batched_tokens": 65536,
        "num_kv_blocks": 65536,
        "eos_every": 0,
        "faults": {"slow_token_s": 0.5},
    },
}
GATEWAY_YAML = """
gateway:
  request_log: false
  # Finished streams' events are kept for reattaching clients; kept briefly here, so that
  # what the test finds left behind is what nothing keeps on purpose.
  streams: {retention_s: 0.05}
scheduling:
  max_queued: 10000
  default: {max_depth: 10000}
sidecars:
  - {name: mem, address: '%s'}
"""


def expired(gw: Gateway) -> bool:
    """The stream store kept none of the finished streams past their retention."""
    store = gw.streams.store
    store.sweep()
    return not store.logs


def idle(gw: Gateway) -> bool:
    pools = gw.scheduler.pools.values()
    links = gw.fleet.by_name.values()
    return all(not p.running and not p.queue for p in pools) and all(
        link.inflight == 0 for link in links
    )


def held() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def cyclic_garbage() -> collections.Counter[str]:
    """The gateway's objects that only the cyclic collector would free now, by type (asyncio's
    own selector transports leave cycles; uvloop's, the gateway's loop, do not)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = collections.Counter(
            t.__qualname__
            for t in map(type, gc.garbage)
            if t.__module__.startswith(("gateway.", "shardgate."))
        )
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
    return found


class Client:
    """tests/integration/sse_streams.py as its own process, driven line by line."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, port: int) -> Client:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.integration.sse_streams",
            *(str(x) for x in (port, STREAMS, LONG_TOKENS, SHORT_TOKENS)),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    async def line(self) -> str:
        assert self.proc.stdout is not None
        async with asyncio.timeout(120.0):
            return (await self.proc.stdout.readline()).decode().strip()

    def tell(self, word: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(word.encode() + b"\n")

    async def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        async with asyncio.timeout(10.0):
            await self.proc.wait()


async def test_open_streams_hold_bounded_memory_and_leave_none_behind(tmp_path: Path) -> None:
    with sidecar_processes(1, tmp_path, SIM) as procs:
        (address,) = procs
        gw = Gateway(parse(GATEWAY_YAML % address), http_port=0, grpc_port=0)
        await gw.start()
        tracemalloc.start()
        client: Client | None = None
        gc.disable()  # (what the streams leave in cycles stays for cyclic_garbage to find)
        try:
            assert await gw.fleet.wait_connected(30.0)
            base = held()
            client = await Client.start(gw.http_port)
            assert await client.line() == "streaming ok"
            peak = held() - base
            client.tell("drop")
            await until_async(lambda: idle(gw), 60.0, "the dropped streams are aborted")
            client.tell("run")
            assert await client.line() == f"ended {STREAMS}"
            await until_async(lambda: idle(gw), 60.0, "the streams end")
            await until_async(lambda: expired(gw), 30.0, "the finished streams expire")
            cycles = cyclic_garbage()
            left = held() - base
        finally:
            gc.enable()
            tracemalloc.stop()
            if client is not None:
                await client.close()
            await gw.stop(1.0)
    per_open, per_ended = peak / STREAMS, left / (2 * STREAMS)
    print(f"held per open stream: {per_open:.0f} B; left per stream: {per_ended:.0f} B")
    assert per_open < CEILING_PER_STREAM, f"{per_open:.0f} bytes per open stream"
    assert per_ended < LEFT_PER_STREAM, f"{per_ended:.0f} bytes left per stream"
    assert not cycles, f"left in reference cycles: {cycles.most_common(8)}"
