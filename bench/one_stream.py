"""One stream at a time: the time to first token each path adds over calling the engine server
directly, and each proxy's CPU per request, in one run.

The paths, in front of the same engine server (the tests' fake, tests/fake_engine_server.py,
writing its tokens with no delay): the server itself; an `openai`-backend sidecar, spoken to on
its TCP link as the gateway speaks to it; the gateway in front of that sidecar; nginx
(`proxy_buffering off`, one worker), where `nginx` is on the PATH; vLLM's router (Rust), where
`--vllm-router` names its command. Requests go one at a time, the paths taking turns request
by request (so a slower minute of this shared machine falls on all of them), in blocks of
`--block` requests; each process's CPU is read from /proc/<pid>/task/*/schedstat (ns) around
each of its requests.

    python -m bench.one_stream --requests 600 --tokens 32 --vllm-router /tmp/rvenv/bin/vllm-router
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import time
from pathlib import Path

import aiohttp

from bench.link_target import LinkTarget
from bench.nginx_paced import NGINX_CONF, nginx_pids
from bench.openai_backend import MODEL, ROOT, free_port, process, stack, wait_models
from bench.plan import RequestSpec
from bench.scenario import Scenario


def cpu_ns(pids: list[int]) -> int:
    """On-CPU time of every thread of the processes."""
    total = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                total += int((task / "schedstat").read_text().split()[0])
    return total


async def one(http: aiohttp.ClientSession, url: str, tokens: int) -> float:
    """One streamed completion; its time to first token (s)."""
    if url.startswith("link:"):
        return await over_link(url[5:], tokens)
    body = {"model": MODEL, "prompt": "bench the path", "max_tokens": tokens, "stream": True}
    body |= {"ignore_eos": True}
    sent = time.perf_counter()
    first = 0.0
    n = 0
    async with http.post(url + "/v1/completions", json=body) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            if line.startswith(b"data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    k = choice["text"].count(" w")
                    if k and not n:
                        first = time.perf_counter() - sent
                    n += k
    assert n == tokens, (n, tokens)
    return first


Paths = dict[str, tuple[str, dict[str, list[int]]]]  # name -> URL, its processes by name
_LINKS: dict[str, LinkTarget] = {}


async def over_link(address: str, tokens: int) -> float:
    """One request on the sidecar's TCP link, as the gateway sends it; its TTFT (s)."""
    target = _LINKS.get(address)
    if target is None:
        scenario = Scenario(
            name="one-stream", api="link", endpoint="completions", model=MODEL, requests=1
        )
        target = _LINKS[address] = LinkTarget(address, scenario)
    r = await target(RequestSpec(0, 0, "bench the path", tokens, -1, 0.0))
    assert r.ok and r.tokens == tokens, (r.errors, r.detail, r.tokens)
    return r.ttft_s


async def run(
    paths: Paths, requests: int, tokens: int, block: int
) -> tuple[dict[str, list[float]], dict[str, dict[str, list[float]]]]:
    """Each path's TTFTs (s), and each of its processes' µs of CPU per request, per block."""
    ttft: dict[str, list[float]] = {name: [] for name in paths}
    cpu: dict[str, dict[str, list[float]]] = {
        name: {proc: [] for proc in procs} for name, (_, procs) in paths.items()
    }
    connector = aiohttp.TCPConnector(limit=len(paths))
    async with aiohttp.ClientSession(connector=connector) as http:
        for url, _ in paths.values():  # warm up: connections, caches
            for _ in range(20):
                await one(http, url, tokens)
        for _ in range(max(1, requests // block)):
            spent = {name: dict.fromkeys(procs, 0) for name, (_, procs) in paths.items()}
            for _ in range(block):
                for name, (url, procs) in paths.items():
                    start = {proc: cpu_ns(pids) for proc, pids in procs.items()}
                    ttft[name].append(await one(http, url, tokens))
                    for proc, pids in procs.items():
                        spent[name][proc] += cpu_ns(pids) - start[proc]
            for name, by_proc in spent.items():
                for proc, ns in by_proc.items():
                    cpu[name][proc].append(ns / block / 1e3)
    return ttft, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=600)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--block", type=int, default=100)
    p.add_argument("--vllm-router", default="", help="vllm-router's command, to compare with")
    p.add_argument("--out", default="bench/out/one-stream")
    a = p.parse_args()
    out = ROOT / a.out
    out.mkdir(parents=True, exist_ok=True)
    server_url, gateway_url, (fake, side, gate) = stack(out, 64)
    upstream = server_url.rpartition(":")[2]
    with contextlib.ExitStack() as stack_:
        server = stack_.enter_context(process(fake, out / "server.log"))
        sc = stack_.enter_context(process(side, out / "sidecar.log"))
        gw = stack_.enter_context(process(gate, out / "gateway.log"))
        asyncio.run(wait_models(server_url))
        asyncio.run(wait_models(gateway_url))
        paths: Paths = {"direct": (server_url, {})}
        sidecar_port = json.loads(side[side.index("--config-json") + 1])["port"]
        paths["sidecar"] = (f"link:127.0.0.1:{sidecar_port}", {"sidecar": [sc.pid]})
        paths["gateway+sidecar"] = (gateway_url, {"gateway": [gw.pid], "sidecar": [sc.pid]})
        nginx = shutil.which("nginx")
        if nginx:
            port = free_port()
            conf = out / "nginx.conf"
            conf.write_text(NGINX_CONF.format(dir=out, upstream=upstream, port=port))
            ngx = [nginx, "-c", str(conf), "-p", str(out), "-g", "daemon off;"]
            ng = stack_.enter_context(process(ngx, out / "nginx.log"))
            url = f"http://127.0.0.1:{port}"
            asyncio.run(wait_models(url))
            paths["nginx"] = (url, {"nginx": nginx_pids(ng.pid)})
        if a.vllm_router:
            port = free_port()
            cmd = [a.vllm_router, "--host", "127.0.0.1", "--port", str(port)]
            cmd += ["--worker-urls", server_url, "--policy", "round_robin"]
            cmd += ["--log-level", "warning"]
            vr = stack_.enter_context(process(cmd, out / "vllm-router.log"))
            url = f"http://127.0.0.1:{port}"
            asyncio.run(wait_models(url))
            paths["vllm-router"] = (url, {"vllm-router": [vr.pid]})
        ttft, cpu = asyncio.run(run(paths, a.requests, a.tokens, a.block))
        assert server.poll() is None
    direct = statistics.median(ttft["direct"])
    report: dict[str, object] = {"requests": a.requests, "tokens": a.tokens}
    for name in paths:
        p50 = statistics.median(ttft[name])
        report[name] = {
            "ttft_p50_ms": round(p50 * 1e3, 3),
            "ttft_added_ms": round((p50 - direct) * 1e3, 3),
            "cpu_us_per_request": {k: [round(c, 1) for c in v] for k, v in cpu[name].items()},
        }
    (out / "result.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
