"""Engine progress as part of health: a live sidecar whose engine holds work and advances none.

A sidecar keeps sending heartbeats while its engine is wedged (a hung kernel, a deadlocked
scheduler): liveness says UP, and the requests on it would wait for their deadline. Each load
report carries the engine's progress (`steps`, monotonic) and the requests it holds (`held`).
A sidecar is stalled when work is held and nothing progressed for `stall_timeout_s`: the
runtime then takes its replica out (its streams migrate) and ejects it. The next progress, or
the work gone, ends the stall.

- Work held: the sidecar's `held` or this gateway's own requests on the link, whichever is
  larger (a sidecar that lost requests without finishing them is wedged for them).
- Progress: the counter moved, or deltas arrived on the link (heartbeats may come late, or not
  at all, while deltas flow: output is progress too).
- An idle engine (nothing held) is never stalled; the stall is timed from the later of the last
  progress and the moment work appeared. A sidecar that reports no counter is not judged.
- Time the gateway itself was stalled (a paused process, a saturated loop) is forgiven, as the
  heartbeat monitor forgives it: progress it could not read is not the engine's fault.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Watch:
    steps: int
    output_at: float
    since: float  # the last progress, or when work appeared


class StallDetector:
    """Engine progress of every sidecar of the fleet, keyed by sidecar name."""

    __slots__ = ("_watches", "timeout_s")

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = timeout_s  # None: never stalled
        self._watches: dict[str, _Watch] = {}

    def observe(
        self, name: str, now: float, steps: int | None, work: int, output_at: float
    ) -> bool:
        """Whether sidecar `name` is stalled at `now`. `steps`: its last reported progress
        (None: not reported); `work`: the requests it holds; `output_at`: when its link last
        carried deltas (any clock value that changes with each delivery)."""
        timeout = self.timeout_s
        if timeout is None or steps is None or work <= 0:
            self._watches.pop(name, None)
            return False
        w = self._watches.get(name)
        if w is None:
            self._watches[name] = _Watch(steps, output_at, now)
            return False
        if steps != w.steps or output_at != w.output_at:
            w.steps, w.output_at, w.since = steps, output_at, now
            return False
        return now - w.since >= timeout

    def forgive(self, seconds: float) -> None:
        """The gateway itself was stalled this long."""
        for w in self._watches.values():
            w.since += seconds

    def forget(self, name: str) -> None:
        """The link closed (a new link starts afresh) or the sidecar left the fleet."""
        self._watches.pop(name, None)
