"""The sim engine's typed configuration (a part of the sidecar's YAML, under `sim:`)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from engine_sidecar.backends.sim.profiles import PROFILES

PositiveInt = Annotated[int, msgspec.Meta(gt=0)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0.0)]
Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]


class SimFaults(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Fault injection for drills; the defaults inject nothing."""

    # The process exits (os._exit(17)) once the engine has generated this many tokens in total.
    crash_after_tokens: PositiveInt | None = None
    # The engine stops stepping (requests stall, the process lives) after this many tokens.
    hang_after_tokens: NonNegativeInt | None = None
    # Extra time added to every engine step.
    slow_token_s: NonNegativeFloat = 0.0
    # This fraction of requests (chosen by a hash of request_id) fails after its first token.
    error_rate: Fraction = 0.0
    # The sidecar stops sending load reports (read by the servicer, not by the engine).
    stop_heartbeats: bool = False

    def __post_init__(self) -> None:
        # msgspec checks the Meta bounds when decoding; direct construction is checked here.
        if self.crash_after_tokens is not None and self.crash_after_tokens <= 0:
            raise ValueError("crash_after_tokens must be > 0")
        if self.hang_after_tokens is not None and self.hang_after_tokens < 0:
            raise ValueError("hang_after_tokens must be >= 0")
        if self.slow_token_s < 0:
            raise ValueError("slow_token_s must be >= 0")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError("error_rate must be within [0, 1]")


class SimConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A CPU model of a vLLM-like engine; field names follow vLLM's engine arguments."""

    model: str = "sim-llama"
    loras: list[str] = []
    max_model_len: PositiveInt = 4096
    max_num_seqs: PositiveInt = 256
    max_num_batched_tokens: PositiveInt = 8192
    block_size: PositiveInt = 16
    num_kv_blocks: PositiveInt = 16384
    enable_prefix_caching: bool = True
    # Report what the prefix cache holds on the link (vLLM's KV events), as the gateway's
    # precise prefix routing reads it; only with prefix caching.
    kv_events: bool = True
    profile: str = "instant"
    # On average one generated position in `eos_every` ends the request with EOS; 0: never.
    eos_every: NonNegativeInt = 300
    # On average one generated word in `multibyte_every` is a word with a two-byte character,
    # as two tokens that split its bytes (its text comes with the second); 0: never.
    multibyte_every: NonNegativeInt = 0
    seed: int = 0
    # The engine's first step takes this much longer, as a cold engine's does (vLLM compiles
    # and warms up in its first step): its load reports show work held and no progress meanwhile.
    first_step_delay_s: NonNegativeFloat = 0.0
    faults: SimFaults = SimFaults()

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            known = ", ".join(sorted(PROFILES))
            raise ValueError(f"unknown profile {self.profile!r} (known: {known})")
        for name in (
            "max_model_len",
            "max_num_seqs",
            "max_num_batched_tokens",
            "block_size",
            "num_kv_blocks",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.eos_every < 0:
            raise ValueError("eos_every must be >= 0")
        if self.multibyte_every < 0:
            raise ValueError("multibyte_every must be >= 0")
        if self.first_step_delay_s < 0:
            raise ValueError("first_step_delay_s must be >= 0")
        # Like vLLM at start-up: one sequence of max_model_len tokens must fit in the KV cache,
        # otherwise a long request could never be scheduled.
        blocks_per_seq = -(-self.max_model_len // self.block_size)
        if blocks_per_seq > self.num_kv_blocks:
            raise ValueError(
                f"num_kv_blocks {self.num_kv_blocks} cannot hold one sequence of max_model_len "
                f"{self.max_model_len} tokens ({blocks_per_seq} blocks of {self.block_size})"
            )
