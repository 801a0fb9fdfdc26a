"""CPU per token of the gateway and of nginx, each in front of the same paced engine server, in
one run: the paced workload (streams of `--tokens` tokens, one every `--delay` seconds,
`--concurrency` at once) through nginx as a streaming reverse proxy (`proxy_buffering off`,
one worker) and through the gateway and an `openai`-backend sidecar.

The engine server is the tests' fake (tests/fake_engine_server.py: one token per write, no
model). What is compared is each proxy's own process CPU per token (nginx: its master and
worker; the gateway: its one process; the sidecar's is reported beside it), read from /proc at
the edges of each run. Needs `nginx` on the PATH (Debian: `apt-get install nginx-light`).

    python -m bench.nginx_paced --streams 512 --tokens 128 --concurrency 256 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
from pathlib import Path

from bench.cpu import cpu_ticks
from bench.openai_backend import ROOT, free_port, load, measure, process, stack, wait_models

NGINX_CONF = """
worker_processes 1;
error_log {dir}/error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  upstream engine {{ server 127.0.0.1:{upstream}; keepalive 512; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 600s;
    }}
  }}
}}
"""


def nginx_pids(master: int) -> list[int]:
    """nginx's master and its workers."""
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return [master, *(int(c) for c in children)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=512)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--delay", type=float, default=0.01, help="seconds between two tokens")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default="bench/out/nginx-paced")
    a = p.parse_args()
    nginx = shutil.which("nginx")
    if nginx is None:
        sys.exit("bench.nginx_paced: nginx is not installed")
    out = ROOT / a.out
    out.mkdir(parents=True, exist_ok=True)
    server_url, gateway_url, (fake, side, gate) = stack(out, 4096, str(a.delay))
    nginx_port = free_port()
    (out / "nginx.conf").write_text(
        NGINX_CONF.format(dir=out, upstream=server_url.rpartition(":")[2], port=nginx_port)
    )
    ngx = [nginx, "-c", str(out / "nginx.conf"), "-p", str(out), "-g", "daemon off;"]
    rounds = []
    with (
        process(fake, out / "server.log") as server,
        process(side, out / "sidecar.log") as sc,
        process(gate, out / "gateway.log") as gw,
        process(ngx, out / "nginx.log") as ng,
    ):
        nginx_url = f"http://127.0.0.1:{nginx_port}"
        asyncio.run(wait_models(server_url))
        asyncio.run(wait_models(gateway_url))
        asyncio.run(wait_models(nginx_url))
        for url in (gateway_url, nginx_url):  # warm up
            asyncio.run(load(url, a.concurrency, 16, a.concurrency))
        args = (a.streams, a.tokens, a.concurrency)
        for _ in range(a.rounds):
            # (nginx's processes summed: one "nginx" figure)
            pids = dict(enumerate(nginx_pids(ng.pid)))
            by_pid = measure(nginx_url, {str(k): v for k, v in pids.items()}, *args)
            via_nginx = sum(v for k, v in by_pid.items() if k.isdigit())
            ttft = {k: v for k, v in by_pid.items() if k.startswith("ttft")}
            via = measure(gateway_url, {"sidecar": sc.pid, "gateway": gw.pid}, *args)
            row = {"nginx": via_nginx, **{f"nginx_{k}": v for k, v in ttft.items()}}
            rounds.append(row | {f"gateway_{k}": v for k, v in via.items()})
            print(json.dumps(rounds[-1]), flush=True)
        assert cpu_ticks(server.pid) > 0
    report = {"streams": a.streams, "tokens": a.tokens, "concurrency": a.concurrency}
    report |= {"delay_s": a.delay, "rounds": rounds}
    (out / "result.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
