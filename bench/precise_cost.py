"""What precise prefix routing costs the gateway per request: tokenizing the prompt as the engine
does, naming its blocks, and the router's choice, against the approximate scorer alone.

`--replicas` sim replicas report `--groups` cached prefixes of `--prefix-words` words each
(through the same EngineCaches the links feed); each request is a chat of one group's prefix
and a question. For each variant, in this one process, the router's per-request work
(`Router.features` then `Profile.route`) is timed over `--requests` requests; then the
tokenizers alone (the sim's and a Hugging Face one, the tiny Llama's).

    .venv/bin/python -m bench.precise_cost
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from shardgate.v1.kvblocks import block_names, start

from bench.plan import words
from engine_sidecar.backends.tiny_model import ensure_tiny_model
from gateway.api.openai.protocol import decode_chat
from gateway.config.routing import ProfileSpec, RoutingSettings, ScorerSpec
from gateway.policy.routing.engine_cache import EngineCaches
from gateway.policy.routing.router import Router
from gateway.policy.routing.snapshot import Replica
from gateway.prompt_tokens import PromptTokens
from gateway.types import GenerationRequest

MODEL = "sim-llama"


def requests(a: argparse.Namespace, prefixes: list[str]) -> list[GenerationRequest]:
    rng = random.Random(1)
    out = []
    for i in range(a.requests):
        body = {
            "model": MODEL,
            "messages": [
                {"role": "system", "content": prefixes[i % len(prefixes)]},
                {"role": "user", "content": words(rng, 20)},
            ],
            "max_tokens": 16,
        }
        out.append(decode_chat(json.dumps(body).encode(), f"r{i}"))
    return out


def timed_route(router: Router, reqs: list[GenerationRequest], pool: list[Replica]) -> float:
    t = time.perf_counter()
    for r in reqs:
        f = router.features(r)
        router.profile.route(f, pool, 0.0)
    return (time.perf_counter() - t) / len(reqs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--groups", type=int, default=48)
    p.add_argument("--prefix-words", type=int, default=2000)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    rng = random.Random(0)
    prefixes = [words(rng, a.prefix_words) for _ in range(a.groups)]
    tokens = PromptTokens(1 << 20)
    tokens.named(MODEL, "sim")
    caches = EngineCaches()
    caches.index.speculative_s = 0.0
    names = [f"sim-{i}" for i in range(a.replicas)]
    for n in names:
        caches.announced(n, 16)
    reqs = requests(a, prefixes)
    for g in range(len(prefixes)):  # each group's prefix cached on one replica
        ids = tokens.ids(MODEL, reqs[g].generation) or []
        caches.index.stored(names[g % a.replicas], block_names(ids, 16, start(MODEL)))
    pool = [
        Replica(
            name=n, address=f"{n}:1", head=n, members=(n,), models={MODEL: 4096}, max_num_seqs=16
        )
        for n in names
    ]
    approx = RoutingSettings(
        profile=ProfileSpec(
            scorers=(
                ScorerSpec(type="load"),
                ScorerSpec(type="prefix", params={"engine_events": False}),
            )
        )
    )
    variants = {
        "approximate": Router(approx, None, caches=caches, tokens=tokens),
        "precise": Router(RoutingSettings(), None, caches=caches, tokens=tokens),
    }
    results: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(a.rounds):
        for name, router in variants.items():
            results[name].append(timed_route(router, reqs, pool))
    best = {k: min(v) for k, v in results.items()}
    print(f"{a.replicas} replicas, {a.groups} groups of {a.prefix_words} words; per request:")
    for k, v in best.items():
        print(
            f"  {k}: {v * 1e6:,.0f} us (rounds: {', '.join(f'{x * 1e6:,.0f}' for x in results[k])})"
        )
    print(f"  precise / approximate: {best['precise'] / best['approximate']:.2f}x")
    f = variants["precise"].features(reqs[0])
    print(f"  prompt: {len(f.prompt_ids or ())} tokens")
    # The tokenizers alone: the sim's, and the tiny Llama's (a Hugging Face fast tokenizer).
    with tempfile.TemporaryDirectory() as tmp:
        hf = PromptTokens(1 << 20)
        hf.named(MODEL, str(ensure_tiny_model(Path(tmp) / "tiny")))
        fresh = requests(
            argparse.Namespace(requests=40), [words(rng, a.prefix_words) for _ in range(40)]
        )
        for label, tok in (("sim", tokens), ("hf tiny-llama", hf)):
            t = time.perf_counter()
            for r in fresh:  # (prefixes not seen before: every piece encoded)
                tok.ids(MODEL, r.generation)
            cold = (time.perf_counter() - t) / len(fresh)
            t = time.perf_counter()
            for r in reqs[:500]:  # (48 prefixes, seen before)
                tok.ids(MODEL, r.generation)
            warm = (time.perf_counter() - t) / 500
            count = len(tok.ids(MODEL, reqs[0].generation) or ())
            print(
                f"  tokenize ({label}, {count} tokens): a new prefix {cold * 1e6:,.0f} us, "
                f"a shared one {warm * 1e6:,.0f} us"
            )
        capped = PromptTokens(4096)
        capped.named(MODEL, "sim")
        t = time.perf_counter()
        for r in reqs[:500]:
            capped.ids(MODEL, r.generation)
        per = (time.perf_counter() - t) / 500
        print(f"  tokenize (sim, max_prompt_chars 4096): {per * 1e6:,.0f} us")


if __name__ == "__main__":
    main()
