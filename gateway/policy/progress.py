"""Engine progress as part of health: a live sidecar whose engine holds work and advances none.

A sidecar keeps sending heartbeats while its engine is wedged (a hung kernel, a deadlocked
scheduler): liveness says UP, and the requests on it would wait for their deadline. Each load
report carries the engine's progress (`steps`, monotonic) and the requests it holds (`held`).
A sidecar is stalled when work is held and nothing progressed for its stall timeout: the runtime
then ejects its replica, as far as the pool's ejection cap allows (its streams migrate). The
next progress, or the work gone, ends the stall.

- Work held: the sidecar's `held` or this gateway's own requests on the link, whichever is
  larger (a sidecar that lost requests without finishing them is wedged for them).
- Progress: the counter moved, or deltas arrived on the link (heartbeats may come late, or not
  at all, while deltas flow: output is progress too).
- An idle engine (nothing held) is never stalled; the stall is timed from the later of the last
  progress and the moment work appeared. A sidecar that reports no counter is not judged.
- A fresh engine (first seen with its counter at 0) is given its first step: a cold engine
  compiles and warms up in it, under a busy CPU for much longer than any later step. It is judged
  in it only after `startup_grace_s` plus the stall timeout (an engine hung in its first step is
  still found), and for `startup_grace_s` after that first step its timeout is at least the grace.
- The timeout scales with the engine: at least `step_multiplier` times the longest wait between
  two progresses over its last `STEPS_SEEN` ones (its first step not among them), so a slow
  engine is not taken for a stalled one.
- Time the gateway itself was stalled (a paused process, a saturated loop) is forgiven, as the
  heartbeat monitor forgives it: progress it could not read is not the engine's fault.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

STEPS_SEEN = 16  # the waits between progresses the timeout scales with


@dataclass(slots=True)
class _Engine:
    steps: int  # the counter last seen
    output_at: float
    since: float | None  # the last progress, or when work appeared; None: no work held
    # When its first step was seen; None: not yet (a fresh engine in its first step); -inf: it
    # had stepped before it was first seen.
    stepped_at: float | None
    waits: deque[float] = field(default_factory=lambda: deque(maxlen=STEPS_SEEN))


class StallDetector:
    """Engine progress of every sidecar of the fleet, keyed by sidecar name."""

    __slots__ = ("_engines", "startup_grace_s", "step_multiplier", "timeout_s")

    def __init__(
        self, timeout_s: float | None, startup_grace_s: float = 0.0, step_multiplier: float = 0.0
    ) -> None:
        self.timeout_s = timeout_s  # None: never stalled
        self.startup_grace_s = startup_grace_s
        self.step_multiplier = step_multiplier
        self._engines: dict[str, _Engine] = {}

    def configure(
        self, timeout_s: float | None, startup_grace_s: float, step_multiplier: float
    ) -> None:
        """New settings (a config reload); what was seen of each engine is kept."""
        self.timeout_s = timeout_s
        self.startup_grace_s = startup_grace_s
        self.step_multiplier = step_multiplier

    def observe(
        self, name: str, now: float, steps: int | None, work: int, output_at: float
    ) -> bool:
        """Whether sidecar `name` is stalled at `now`. `steps`: its last reported progress
        (None: not reported); `work`: the requests it holds; `output_at`: when its link last
        carried deltas (any clock value that changes with each delivery)."""
        if self.timeout_s is None or steps is None:
            self._engines.pop(name, None)
            return False
        e = self._engines.get(name)
        if e is None or steps < e.steps:  # new, or its counter went back: the engine restarted
            first = None if steps == 0 else -math.inf
            self._engines[name] = _Engine(steps, output_at, now if work > 0 else None, first)
            return False
        progressed = steps != e.steps or output_at != e.output_at
        first_step = progressed and e.stepped_at is None
        if first_step:
            e.stepped_at = now
        if work <= 0 or e.since is None or progressed:
            if progressed and e.since is not None and not first_step:
                e.waits.append(now - e.since)
            e.steps, e.output_at = steps, output_at
            e.since = now if work > 0 else None
            return False
        return now - e.since >= self.timeout_for(name, now)

    def timeout_for(self, name: str, now: float) -> float:
        """The stall timeout sidecar `name`'s engine is judged by at `now` (inf: not judged)."""
        timeout = self.timeout_s
        e = self._engines.get(name)
        if timeout is None or e is None:
            return math.inf
        if e.stepped_at is None:  # its first step: the grace, then the timeout
            return self.startup_grace_s + timeout
        if e.waits:
            timeout = max(timeout, self.step_multiplier * max(e.waits))
        if now < e.stepped_at + self.startup_grace_s:
            timeout = max(timeout, self.startup_grace_s)
        return timeout

    def pause(self, name: str) -> None:
        """Its reports are stale (heartbeats late): stop timing it; what was seen of the engine
        (its first step, its step times) is kept."""
        e = self._engines.get(name)
        if e is not None:
            e.since = None

    def forgive(self, seconds: float) -> None:
        """The gateway itself was stalled this long."""
        for e in self._engines.values():
            if e.since is not None:
                e.since += seconds
            if e.stepped_at is not None:
                e.stepped_at += seconds

    def forget(self, name: str) -> None:
        """The link closed (a new link starts afresh) or the sidecar left the fleet."""
        self._engines.pop(name, None)
