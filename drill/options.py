"""What a drill run does: its cluster, faults, load and timing (from the command line)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from drill.faults import Kind


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    config_path: str
    attach: bool = False
    kinds: tuple[Kind, ...]
    model: str = "sim-llama"
    # Per fault: load before the injection (its streams start one after another over it), the
    # fault's length, load after recovery.
    warmup_s: float = 2.0
    hold_s: float = 2.5
    settle_s: float = 2.0
    recover_timeout_s: float = 20.0
    drain_timeout_s: float = 30.0
    ready_timeout_s: float = 60.0
    slow_token_s: float = 0.02
    # The load.
    concurrency: int = 16
    requests: int = 32
    min_tokens: int = 200
    max_tokens: int = 300
    request_timeout_s: float = 60.0
    sample_interval_s: float = 0.1
    out_dir: Path | None = None
    log_level: str = "WARNING"

    def __post_init__(self) -> None:
        for name in ("warmup_s", "hold_s", "sample_interval_s", "request_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        for name in ("settle_s", "recover_timeout_s", "drain_timeout_s", "slow_token_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.concurrency <= 0 or self.requests <= 0:
            raise ValueError("concurrency and requests must be > 0")
        if not 0 < self.min_tokens <= self.max_tokens:
            raise ValueError("tokens: need 0 < MIN <= MAX")
        if not self.kinds:
            raise ValueError("no fault to run")
