"""How fast the sim engine core steps on this CPU (instant profile, no asyncio).

Run: .venv/bin/python bench/sim_core_speed.py
Prints tokens/s and microseconds per step of SimCore.step() for 1, 64 and 256 concurrent
requests of 256 max_tokens each (EOS off, so every request runs to its length).
"""

from __future__ import annotations

import time

from shardgate.v1.params import Generation, Sampling

from engine_sidecar.backend import EngineRequest
from engine_sidecar.backends.sim.config import SimConfig
from engine_sidecar.backends.sim.core import SimCore

MAX_TOKENS = 256
PROMPT_TOKENS = 128


def measure(concurrency: int, rounds: int = 3) -> tuple[float, float]:
    """Best of `rounds`: (generated tokens per second, seconds per step)."""
    best_tps, best_step = 0.0, float("inf")
    for _ in range(rounds):
        core = SimCore(SimConfig(max_num_seqs=max(concurrency, 1), eos_every=0))
        for i in range(concurrency):
            prompt = tuple(4 + (i * 7 + j) % 300 for j in range(PROMPT_TOKENS))
            core.add(
                EngineRequest(
                    i,
                    Generation(
                        request_id=f"r{i}",
                        model="sim-llama",
                        sampling=Sampling(max_tokens=MAX_TOKENS),
                        prompt_token_ids=prompt,
                    ),
                )
            )
        steps = 0
        t0 = time.perf_counter()
        while core.has_work:
            core.step()
            steps += 1
        elapsed = time.perf_counter() - t0
        best_tps = max(best_tps, core.generated_tokens / elapsed)
        best_step = min(best_step, elapsed / steps)
    return best_tps, best_step


def main() -> None:
    print(f"SimCore.step(), instant profile, {MAX_TOKENS} max_tokens, prompt {PROMPT_TOKENS}")
    for n in (1, 64, 256):
        tps, step_s = measure(n)
        print(f"  {n:4d} concurrent: {tps:12,.0f} tokens/s  {step_s * 1e6:9.1f} us/step")


if __name__ == "__main__":
    main()
