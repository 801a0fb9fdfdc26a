"""Routing on the engines' KV events against the gateway's own guess and against chance.

A fleet of sim sidecars on a timing profile with real prefill costs (`--profile`), llm-d's
workload shape scaled to this machine: `--groups` groups that share a `--prefix-tokens` prefix,
each request a group's prefix plus a suffix of its own, the fleet's KV cache about `--kv-demand`
full with the groups' prefixes when each is cached once. For each routing policy a fresh
cluster (`shardgate up`, `--workers` gateway processes), then Poisson arrivals at each of
`--rates` in turn (rising), `--requests` each: TTFT p50/p90, output tokens/s, and the share of
prompt tokens the engines found cached (the gateway's `shardgate_cached_prompt_tokens`).

    .venv/bin/python -m bench.kv_routing --rates 8,16,24 --requests 300
    .venv/bin/python -m bench.kv_routing --workers 2 --policies approximate,precise
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

POLICIES: dict[str, str] = {
    "random": "{profile: {scorers: [], picker: {type: random}}}",
    "approximate": (
        "{profile: {scorers: [{type: load, weight: 1}, "
        "{type: prefix, weight: 1, params: {engine_events: false}}]}}"
    ),
    "precise": "{profile: {scorers: [{type: load, weight: 1}, {type: prefix, weight: 1}]}}",
}


def config(a: argparse.Namespace, policy: str, port: int) -> str:
    blocks_per_prefix = -(-a.prefix_tokens // a.block_size)
    # Each group's prefix once, across the fleet, is `kv_demand` of its KV cache.
    num_blocks = int(a.groups * blocks_per_prefix / a.replicas / a.kv_demand)
    sim = (
        f"{{model: sim-llama, profile: {a.profile}, max_num_seqs: {a.max_num_seqs}, "
        f"num_kv_blocks: {num_blocks}, block_size: {a.block_size}, eos_every: 0}}"
    )
    lines = [
        "gateway:",
        f"  http: {{host: 127.0.0.1, port: {port}}}",
        f"  grpc: {{host: 127.0.0.1, port: {port + 1}}}",
        "  request_timeout_s: 600",
        "  first_token_timeout_s: 300",
        f"routing: {POLICIES[policy]}",
        "health: {suspect_after_intervals: 20, down_after_intervals: 60}",
        "sidecars:",
    ]
    for i in range(a.replicas):
        lines += [
            f"  - name: sim-{i}",
            f"    address: 127.0.0.1:{port + 10 + i}",
            "    launch:",
            "      backend: sim",
            f"      sim: {sim}",
        ]
    return "\n".join(lines) + "\n"


def scenario(a: argparse.Namespace) -> str:
    return (
        "name: kv-routing\n"
        "mode: open\n"
        "rate_rps: 1\n"  # (each run's --rate replaces it)
        "concurrency: 512\n"
        f"requests: {a.requests}\n"
        f"prefix: {{count: {a.groups}, tokens: {a.prefix_tokens}, fraction: 1.0}}\n"
        f"prompt_tokens: {a.suffix_tokens}\n"
        f"output_tokens: {a.output_tokens}\n"
        "ignore_eos: true\n"
        f"seed: {a.seed}\n"
    )


def metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        body = r.read().decode()
    out: dict[str, float] = {}
    for line in body.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, _, value = line.rpartition(" ")
        base = name.split("{", 1)[0]
        if base.endswith("_total") and "{" in name and "kv_matched" not in name:
            out[base] = out.get(base, 0.0) + float(value)  # (summed over labels)
        else:
            out[name] = out.get(name, 0.0) + float(value)
    return out


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"shardgate up exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the cluster did not become ready")


def run_policy(a: argparse.Namespace, policy: str, work: Path) -> list[dict[str, Any]]:
    port = a.port
    cfg = work / f"{policy}.yaml"
    cfg.write_text(config(a, policy, port))
    scen = work / "scenario.yaml"
    scen.write_text(scenario(a))
    cmd = [sys.executable, "-m", "gateway", "up", "--config", str(cfg), "--log-level", "warning"]
    if a.workers > 1:
        cmd += ["--workers", str(a.workers)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        wait_ready(port, proc)
        time.sleep(1.0)  # (every worker linked)
        for rate in a.rates:
            before = metrics(port)
            out = work / f"{policy}-{rate}"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gateway",
                    "bench",
                    "--url",
                    f"http://127.0.0.1:{port}",
                    "--scenario",
                    str(scen),
                    "--rate",
                    str(rate),
                    "--out",
                    str(out),
                    "--quiet",
                    "--no-plots",
                    "--no-progress",
                ],
                check=True,
            )
            after = metrics(port)
            report = json.loads((out / "report.json").read_text())
            rows.append(row(policy, rate, report, before, after))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return rows


def _delta(before: dict[str, float], after: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def row(
    policy: str,
    rate: float,
    report: dict[str, Any],
    before: dict[str, float],
    after: dict[str, float],
) -> dict[str, Any]:
    total = report
    ttft = total["latency"]["ttft_ms"]
    prompt = _delta(before, after, "shardgate_prompt_tokens_total")
    cached = _delta(before, after, "shardgate_cached_prompt_tokens_total")
    chosen = _delta(before, after, 'shardgate_kv_matched_tokens_total{on="chosen"}')
    best = _delta(before, after, 'shardgate_kv_matched_tokens_total{on="best"}')
    return {
        "policy": policy,
        "rate": rate,
        "ok": total["requests"]["ok"],
        "failed": total["requests"]["failed"],
        "ttft_p50_ms": round(ttft["p50"], 1),
        "ttft_p90_ms": round(ttft["p90"], 1),
        "out_tok_s": round(total["throughput"]["output_tokens_per_s"], 1),
        "cached_share": round(cached / prompt, 3) if prompt else 0.0,
        "matched_chosen_of_best": round(chosen / best, 3) if best else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--groups", type=int, default=48)
    p.add_argument("--prefix-tokens", type=int, default=2000)
    p.add_argument("--suffix-tokens", type=int, default=64)
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--kv-demand", type=float, default=0.75)
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--profile", default="llama-70b-a100-tp8")
    p.add_argument("--rates", default="8,16,24", help="requests/s, in turn")
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--policies", default="random,approximate,precise")
    p.add_argument("--port", type=int, default=18400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the rows here too")
    a = p.parse_args()
    a.rates = [float(r) for r in a.rates.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kv-routing-") as tmp:
        for policy in a.policies.split(","):
            rows += run_policy(a, policy, Path(tmp))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print(
        f"\n{a.replicas} sims ({a.profile}), {a.groups} groups x {a.prefix_tokens} tokens, "
        f"workers {a.workers}, pid {os.getpid()}"
    )
    print("| routing | rate/s | TTFT p50 / p90 ms | output tok/s | cached | ok/failed |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['policy']} | {r['rate']:g} | {r['ttft_p50_ms']:,} / {r['ttft_p90_ms']:,} | "
            f"{r['out_tok_s']:,} | {r['cached_share']:.0%} | {r['ok']}/{r['failed']} |"
        )


if __name__ == "__main__":
    main()
