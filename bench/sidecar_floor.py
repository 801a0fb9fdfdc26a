"""The least a Python process pays to read the paced streams an `openai` sidecar reads.

uvloop protocols open `--concurrency` streamed completions at a time on the tests' fake engine
server (one token per write, `--delay` s apart) and do nothing else with them: `--parse` adds
httptools' parsing of the answer, as the sidecar does it. Its own CPU per token (per socket
read: one token each), against the sidecar's in bench.nginx_paced's runs, is what the sidecar's
own work costs above the system calls and wake-ups it cannot avoid.

    python -m bench.sidecar_floor --streams 512 --tokens 128 --concurrency 256
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import cast

import httptools
import uvloop

from bench.openai_backend import MODEL, ROOT, free_port, process, wait_models


class Reader(asyncio.Protocol):
    """One streamed completion: counts its reads, closes at `[DONE]`."""

    def __init__(self, body: bytes, parse: bool, done: asyncio.Future[int]) -> None:
        self._request = body
        self._done = done
        self._parser = httptools.HttpResponseParser(self) if parse else None
        self.reads = 0
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        if self._parser is not None:
            self._parser.feed_data(data)
        elif b"[DONE]" in data:
            self.on_body(data)

    def on_body(self, body: bytes) -> None:
        if b"[DONE]" in body and self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_result(self.reads)


async def read_all(port: int, a: argparse.Namespace) -> tuple[int, float]:
    """The reads, and the process's CPU seconds over them."""
    body = json.dumps({"model": MODEL, "prompt": "bench the path", "max_tokens": a.tokens,
                       "stream": True}).encode()  # fmt: skip
    head = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    head += b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    loop = asyncio.get_running_loop()
    reads = 0
    queue = iter(range(a.streams))

    async def worker() -> None:
        nonlocal reads
        for _ in queue:
            done: asyncio.Future[int] = loop.create_future()
            reader = Reader(head + body, a.parse, done)
            await loop.create_connection(lambda r=reader: r, "127.0.0.1", port)  # type: ignore[misc]
            n = await done
            reads += n

    start = time.process_time()
    await asyncio.gather(*(worker() for _ in range(a.concurrency)))
    return reads, time.process_time() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=512)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--delay", type=float, default=0.01, help="seconds between two tokens")
    p.add_argument("--parse", action="store_true", help="parse the answers (httptools)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default="bench/out/sidecar-floor")
    a = p.parse_args()
    out = ROOT / a.out
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = [sys.executable, "-m", "tests.fake_engine_server", str(port), str(a.delay)]
    rounds = []
    with process(server, out / "server.log"):
        asyncio.run(wait_models(f"http://127.0.0.1:{port}"))
        for _ in range(a.rounds):
            reads, cpu_s = uvloop.run(read_all(port, a))
            rounds.append({"reads": reads, "us_cpu_per_read": round(cpu_s / reads * 1e6, 2)})
            print(json.dumps(rounds[-1]), flush=True)
    report = {"streams": a.streams, "tokens": a.tokens, "concurrency": a.concurrency}
    report |= {"delay_s": a.delay, "parse": a.parse, "rounds": rounds}
    (out / "result.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
