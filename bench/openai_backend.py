"""CPU per token of the gateway and an `openai`-backend sidecar in front of an OpenAI-compatible
engine server, against calling that server directly.

The server is the tests' fake (tests/fake_engine_server.py: one token per write, no model), so
what is measured is the cost of the path. Each part runs as its own process; CPU is read from
/proc at the edges of each run.

    python -m bench.openai_backend --streams 400 --tokens 200 --concurrency 32
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp

from bench.cpu import TICKS_PER_S, cpu_ticks

ROOT = Path(__file__).resolve().parents[1]
MODEL = "fake-llm"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stack(out: Path, max_num_seqs: int, *fake_args: str) -> tuple[str, str, list[list[str]]]:
    """The fake engine server (`fake_args` after its port), an `openai`-backend sidecar in front
    of it and a gateway in front of that, on free ports, their configs under `out`: the server's
    URL, the gateway's URL, and the three commands."""
    py = sys.executable
    server_port, sidecar_port, http_port = free_port(), free_port(), free_port()
    server_url = f"http://127.0.0.1:{server_port}"
    sidecar = {
        "name": "bench-openai",
        "port": sidecar_port,
        "backend": "openai",
        "openai": {"base_url": server_url, "model": MODEL, "max_num_seqs": max_num_seqs},
    }
    gateway_yaml = out / "gateway.yaml"
    gateway_yaml.write_text(
        "gateway: {max_body_bytes: 1048576, default_max_tokens: 256}\n"
        f"sidecars:\n  - {{name: bench-openai, address: '127.0.0.1:{sidecar_port}'}}\n"
    )
    fake = [py, "-m", "tests.fake_engine_server", str(server_port), *fake_args]
    side = [py, "-m", "gateway", "sidecar", "--config-json", json.dumps(sidecar)]
    gate = [py, "-m", "gateway", "gateway", "--config", str(gateway_yaml)]
    gate += ["--http-port", str(http_port), "--grpc-port", str(free_port())]
    gate += ["--log-level", "WARNING"]
    return server_url, f"http://127.0.0.1:{http_port}", [fake, side, gate]


@contextlib.contextmanager
def process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        p = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield p
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


async def wait_models(
    url: str, timeout_s: float = 60.0, headers: dict[str, str] | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession(headers=headers) as http:
        while True:
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with http.get(url + "/v1/models", timeout=aiohttp.ClientTimeout(2)) as r:
                    if r.status == 200 and MODEL in await r.text():
                        return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not serve {MODEL}")
            await asyncio.sleep(0.2)


async def load(
    url: str, streams: int, tokens: int, concurrency: int, ttfts: list[float] | None = None
) -> int:
    """Stream `streams` completions of `tokens` tokens; the tokens received. Each stream's time
    to its first token (from sending the request) goes to `ttfts`."""
    body = {"model": MODEL, "prompt": "bench the path", "max_tokens": tokens, "stream": True}
    got = 0
    queue = iter(range(streams))

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal got
        for _ in queue:
            sent = time.perf_counter()
            async with http.post(url + "/v1/completions", json=body) as r:
                assert r.status == 200, await r.text()
                n = 0
                async for line in r.content:
                    if line.startswith(b"data: {"):  # each token's text is " w<id>"
                        for choice in json.loads(line[6:])["choices"]:
                            k = choice["text"].count(" w")
                            if k and not n and ttfts is not None:
                                ttfts.append(time.perf_counter() - sent)
                            n += k
                assert n == tokens, (n, tokens)
                got += n

    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
    return got


def measure(
    url: str, pids: dict[str, int], streams: int, tokens: int, concurrency: int
) -> dict[str, float]:
    """µs of CPU per token of each process; the tokens per second; the time to first token's
    p50 and p90 (ms)."""
    before = {name: cpu_ticks(pid) for name, pid in pids.items()}
    start = time.monotonic()
    ttfts: list[float] = []
    got = asyncio.run(load(url, streams, tokens, concurrency, ttfts))
    wall = time.monotonic() - start
    out = {
        name: (cpu_ticks(pid) - before[name]) / TICKS_PER_S / got * 1e6
        for name, pid in pids.items()
    }
    out["tokens_per_s"] = got / wall
    ttfts.sort()
    out["ttft_p50_ms"] = ttfts[len(ttfts) // 2] * 1e3
    out["ttft_p90_ms"] = ttfts[len(ttfts) * 9 // 10] * 1e3
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=400)
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--out", default="bench/out/openai-backend")
    a = p.parse_args()
    out = ROOT / a.out
    out.mkdir(parents=True, exist_ok=True)
    server_url, gateway_url, (fake, side, gate) = stack(out, 1024)
    with (
        process(fake, out / "server.log") as server,
        process(side, out / "sidecar.log") as sc,
        process(gate, out / "gateway.log") as gw,
    ):
        asyncio.run(wait_models(server_url))
        asyncio.run(wait_models(gateway_url))
        asyncio.run(load(gateway_url, a.concurrency, 16, a.concurrency))  # warm up
        args = (a.streams, a.tokens, a.concurrency)
        direct = measure(server_url, {"server": server.pid}, *args)
        pids = {"server": server.pid, "sidecar": sc.pid, "gateway": gw.pid}
        via = measure(gateway_url, pids, *args)
    report = {"streams": a.streams, "tokens": a.tokens, "concurrency": a.concurrency}
    report |= {"direct": direct, "via_gateway": via}
    (out / "result.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
