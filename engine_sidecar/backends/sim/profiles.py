"""Timing profiles: how long one engine step of the sim engine takes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TimingProfile:
    """Step time = decode part (if anything runs) + prefill part (if any uncached tokens)."""

    decode_base_s: float = 0.0  # per decode step
    decode_per_seq_s: float = 0.0  # added per running sequence
    prefill_per_token_s: float = 0.0  # per UNCACHED prompt token
    prefill_base_s: float = 0.0  # added to a step that prefills anything


PROFILES: dict[str, TimingProfile] = {
    # Tests: every step takes no time.
    "instant": TimingProfile(),
    # Tests that need a stream to last a while: ~500 steps/s.
    "fast": TimingProfile(
        decode_base_s=0.002, decode_per_seq_s=0.00002, prefill_per_token_s=0.00001
    ),
    # A real decode pace: one token every 10 ms, whatever the batch (the paced bench).
    "paced-10ms": TimingProfile(decode_base_s=0.010),
    # One token every 500 ms: 10,000 streams at a pace one small machine sustains (20,000
    # tokens/s for the client, the gateway and the sims together; at 10 ms they would ask for
    # 1,000,000), for the memory an open stream costs rather than that of a backlog.
    "paced-500ms": TimingProfile(decode_base_s=0.5),
    # The seeds' figures: ~45 tokens/s for one stream, prefill ~8k tokens/s.
    "llama-70b-a100-tp8": TimingProfile(
        decode_base_s=0.022,
        decode_per_seq_s=0.0001,
        prefill_per_token_s=0.00012,
        prefill_base_s=0.005,
    ),
}


def step_time_s(profile: TimingProfile, num_running: int, prefill_tokens: int) -> float:
    """Seconds one step takes with `num_running` sequences and `prefill_tokens` to compute."""
    t = 0.0
    if num_running > 0:
        t += profile.decode_base_s + profile.decode_per_seq_s * num_running
    if prefill_tokens > 0:
        t += profile.prefill_base_s + profile.prefill_per_token_s * prefill_tokens
    return t
