"""What the store costs a request: the gateway's CPU per request with a key of the config file
and no store, and with a store key (a budget, the ledger written), the same price on both, in
one run.

Two gateways in front of the same `openai`-backend sidecar and fake engine server (as
bench/one_stream.py's), requests one at a time, taking turns request by request (in an order
that rotates, so that no place in a turn is favoured), in blocks; each gateway's CPU read from
/proc/<pid>/task/*/schedstat around its requests. The store's gateway is also called with the
config file's key (`store-config-key`: no budget, its ledger row still written); the other
gateway is called twice a turn too (`off`, `off-again`), so that both processes are as busy.

    python -m bench.store_cost --requests 2000 --tokens 16
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics

import aiohttp

from bench.one_stream import cpu_ns
from bench.openai_backend import MODEL, ROOT, free_port, process, stack, wait_models

MASTER = "sk-bench-master"
YAML_KEY = "sk-bench-yaml"


async def one(http: aiohttp.ClientSession, url: str, key: str | None, tokens: int) -> None:
    body = {"model": MODEL, "prompt": "bench the path", "max_tokens": tokens, "stream": True}
    body |= {"ignore_eos": True}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with http.post(url + "/v1/completions", json=body, headers=headers) as r:
        assert r.status == 200, await r.text()
        async for _ in r.content:
            pass


async def make_key(url: str) -> str:
    """A store key with a budget; on a connection of its own (a connection that has carried a
    request of another route stays with aiohttp's path, not the lean one)."""
    body = {"max_budget": 1e9, "budget_duration": "30d", "models": [MODEL]}
    headers = {"Authorization": f"Bearer {MASTER}"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + "/key/generate", json=body, headers=headers) as r,
    ):
        assert r.status == 200, await r.text()
        return str((await r.json())["key"])


async def run(
    paths: dict[str, tuple[str, int]], requests: int, tokens: int, block: int
) -> dict[str, list[float]]:
    """Each gateway's µs of CPU per request, per block."""
    cpu: dict[str, list[float]] = {name: [] for name in paths}
    keys = {"off": YAML_KEY, "off-again": YAML_KEY, "store-config-key": YAML_KEY}
    keys["store"] = await make_key(paths["store"][0])
    async with aiohttp.ClientSession() as http:
        for name, (url, _) in paths.items():
            for _ in range(50):
                await one(http, url, keys[name], tokens)
        for _ in range(max(1, requests // block)):
            spent = dict.fromkeys(paths, 0)
            for i in range(block):
                names = list(paths)
                names = names[i % len(names) :] + names[: i % len(names)]  # (no place favoured)
                for name in names:
                    url, pid = paths[name]
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
    price = (
        f"pricing:\n  models:\n    {MODEL}: {{prompt_per_1k_usd: 1, completion_per_1k_usd: 2}}\n"
    )
    text = (out / "gateway.yaml").read_text() + price
    text += f"tenants:\n  - {{name: bench, keys: [{YAML_KEY}]}}\n"
    (out / "gateway.yaml").write_text(text)
    stored = out / "gateway-store.yaml"
    stored.write_text(
        text + f"store: {{url: 'sqlite:///{out}/store.db'}}\nadmin: {{master_key: {MASTER}}}\n"
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
        paths = {"off": (gateway_url, gw.pid), "off-again": (gateway_url, gw.pid)}
        paths |= {"store": (store_url, gw2.pid), "store-config-key": (store_url, gw2.pid)}
        for url in (gateway_url, store_url):
            asyncio.run(wait_models(url, headers={"Authorization": f"Bearer {YAML_KEY}"}))
        cpu = asyncio.run(run(paths, a.requests, a.tokens, a.block))
    med = {name: statistics.median(v) for name, v in cpu.items()}
    off = statistics.median(cpu["off"] + cpu["off-again"])
    report = {
        "requests": a.requests,
        "tokens": a.tokens,
        "cpu_us_per_request": {k: [round(c, 1) for c in v] for k, v in cpu.items()},
        "median_us": {k: round(v, 1) for k, v in med.items()},
        "store_over_off": round(med["store"] / off, 3),
        "store_config_key_over_off": round(med["store-config-key"] / off, 3),
    }
    (out / "result.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
