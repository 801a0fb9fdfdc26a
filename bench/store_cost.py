"""What the store costs a request: the gateway's CPU per request without a store, and with one
(a store key with a budget, a price, the ledger written), in one run.

Two gateways in front of the same `openai`-backend sidecar and fake engine server (as
bench/one_stream.py's), requests one at a time, the two taking turns request by request, in
blocks; each gateway's CPU read from /proc/<pid>/task/*/schedstat around its requests.

    python -m bench.store_cost --requests 2000 --tokens 16
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time

import aiohttp

from bench.one_stream import cpu_ns
from bench.openai_backend import MODEL, ROOT, free_port, process, stack, wait_models

MASTER = "sk-bench-master"


async def one(http: aiohttp.ClientSession, url: str, key: str | None, tokens: int) -> None:
    body = {"model": MODEL, "prompt": "bench the path", "max_tokens": tokens, "stream": True}
    body |= {"ignore_eos": True}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with http.post(url + "/v1/completions", json=body, headers=headers) as r:
        assert r.status == 200, await r.text()
        async for _ in r.content:
            pass


async def make_key(http: aiohttp.ClientSession, url: str) -> str:
    body = {"max_budget": 1e9, "budget_duration": "30d", "models": [MODEL]}
    headers = {"Authorization": f"Bearer {MASTER}"}
    async with http.post(url + "/key/generate", json=body, headers=headers) as r:
        assert r.status == 200, await r.text()
        return str((await r.json())["key"])


async def run(
    paths: dict[str, tuple[str, int]], requests: int, tokens: int, block: int
) -> dict[str, list[float]]:
    """Each gateway's µs of CPU per request, per block."""
    cpu: dict[str, list[float]] = {name: [] for name in paths}
    async with aiohttp.ClientSession() as http:
        keys = {"off": None, "store": await make_key(http, paths["store"][0])}
        for name, (url, _) in paths.items():
            for _ in range(50):
                await one(http, url, keys[name], tokens)
        for _ in range(max(1, requests // block)):
            spent = dict.fromkeys(paths, 0)
            for _ in range(block):
                for name, (url, pid) in paths.items():
                    start = cpu_ns([pid])
                    await one(http, url, keys[name], tokens)
                    spent[name] += cpu_ns([pid]) - start
            for name, ns in spent.items():
                cpu[name].append(ns / block / 1e3)
    return cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--block", type=int, default=200)
    p.add_argument("--out", default="bench/out/store-cost")
    a = p.parse_args()
    out = ROOT / a.out
    out.mkdir(parents=True, exist_ok=True)
    _, gateway_url, (fake, side, gate) = stack(out, 64)
    text = (out / "gateway.yaml").read_text()
    stored = out / "gateway-store.yaml"
    stored.write_text(
        text
        + f"store: {{url: 'sqlite:///{out}/store.db'}}\nadmin: {{master_key: {MASTER}}}\n"
        + f"pricing:\n  models:\n    {MODEL}: {{prompt_per_1k_usd: 1, completion_per_1k_usd: 2}}\n"
    )
    (out / "store.db").unlink(missing_ok=True)
    port = free_port()
    gate2 = [*gate[: gate.index("--config") + 1], str(stored), "--http-port", str(port)]
    gate2 += ["--grpc-port", str(free_port()), "--log-level", "WARNING"]
    with contextlib.ExitStack() as s:
        s.enter_context(process(fake, out / "server.log"))
        s.enter_context(process(side, out / "sidecar.log"))
        gw = s.enter_context(process(gate, out / "gateway.log"))
        gw2 = s.enter_context(process(gate2, out / "gateway-store.log"))
        store_url = f"http://127.0.0.1:{port}"
        asyncio.run(wait_models(gateway_url))
        time.sleep(0.1)
        paths = {"off": (gateway_url, gw.pid), "store": (store_url, gw2.pid)}
        with contextlib.suppress(RuntimeError):
            asyncio.run(wait_models(store_url, 5))  # (401 without a key: wait for its port)
        cpu = asyncio.run(run(paths, a.requests, a.tokens, a.block))
    med = {name: statistics.median(v) for name, v in cpu.items()}
    report = {
        "requests": a.requests,
        "tokens": a.tokens,
        "cpu_us_per_request": {k: [round(c, 1) for c in v] for k, v in cpu.items()},
        "median_us": {k: round(v, 1) for k, v in med.items()},
        "store_over_off": round(med["store"] / med["off"], 3),
    }
    (out / "result.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
