"""Objectives: a request's latency targets, and the pure rules the scheduler applies to them.

A request's targets come from its headers (`x-slo-ttft-ms`, `x-slo-tpot-ms`) or the gRPC fields
of the same names, else its tenant's `objectives`, else its class's (`scheduling.classes.N.
objectives`), field by field. They are in milliseconds on the wire and seconds here.

- `latest_start`: the last moment a waiting request can leave the queue and still make its
  time-to-first-token target, given the engine part predicted for it; a sheddable request still
  queued then is refused (503 + Retry-After) instead of waiting until it is useless.
- `pause_misses`: whether preempting a running request (a pause of the predicted length, then a
  resume) would make it miss its own target: such a request is no victim.
"""

from __future__ import annotations

import math
from typing import Final

from gateway.config.tenants import ObjectiveConfig
from gateway.types import InvalidRequest, Objective

TTFT_HEADER: Final = "x-slo-ttft-ms"
TPOT_HEADER: Final = "x-slo-tpot-ms"
MAX_MS: Final = 3_600_000.0  # an hour: above it, no target means anything to a scheduler


def parse_ms(value: str | float | None, name: str) -> float | None:
    """A target in milliseconds (header text or a number) as seconds; None when not given."""
    if value is None:
        return None
    try:
        ms = float(value)
    except ValueError:
        raise InvalidRequest(f"{name} must be a number of milliseconds", name) from None
    if not 0 < ms <= MAX_MS:  # (NaN fails this too)
        raise InvalidRequest(f"{name} must be above 0 and at most {MAX_MS:.0f}", name)
    return ms / 1000.0


def parse(ttft: str | float | None, tpot: str | float | None) -> Objective | None:
    """The targets a request asks for itself (None: it asks for none)."""
    t = parse_ms(ttft, TTFT_HEADER)
    p = parse_ms(tpot, TPOT_HEADER)
    if t is None and p is None:
        return None
    return Objective(t, p)


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def resolve(
    asked: Objective | None, tenant: ObjectiveConfig | None, klass: ObjectiveConfig | None
) -> Objective | None:
    """The request's own targets, then its tenant's, then its class's, figure by figure."""
    ttft = asked.ttft_s if asked is not None else None
    tpot = asked.tpot_s if asked is not None else None
    for d in (tenant, klass):
        if d is None:
            continue
        if ttft is None:
            ttft = _s(d.ttft_ms)
        if tpot is None:
            tpot = _s(d.tpot_ms)
    if ttft is None and tpot is None:
        return None
    if asked is not None and ttft == asked.ttft_s and tpot == asked.tpot_s:
        return asked
    return Objective(ttft, tpot)


def latest_start(arrival: float, ttft_s: float | None, engine_ttft_s: float | None) -> float:
    """When a queued request must be placed to make its TTFT target: its arrival plus the
    target minus the engine's predicted part; inf when either is unknown (no early refusal
    without a target or a prediction)."""
    if ttft_s is None or engine_ttft_s is None:
        return math.inf
    return arrival + ttft_s - engine_ttft_s


def pause_misses(
    objective: Objective | None,
    now: float,
    arrival: float,
    first_token_at: float,
    generated: int,
    pause_s: float,
) -> bool:
    """Whether a pause of `pause_s` from `now` (preempted, then resumed) makes a request miss a
    target of its own: before its first token, the TTFT target; after it, its time per output
    token so far with the pause added (as if it ended right after: the strictest reading, since
    tokens still to come only dilute the pause)."""
    if objective is None:
        return False
    if not first_token_at:
        if objective.ttft_s is None:
            return False
        deadline = arrival + objective.ttft_s
        return now <= deadline < now + pause_s  # (a target already missed protects nothing)
    if objective.tpot_s is None or generated < 1:
        return False
    so_far = now - first_token_at
    return so_far / generated <= objective.tpot_s < (so_far + pause_s) / generated
