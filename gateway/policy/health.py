"""Sidecar liveness from heartbeats, and the reconnect backoff.

Heartbeats are the link's periodic load reports. A sidecar is UP while they arrive; SUSPECT once
`suspect_after` intervals pass without one (still routable, but the `healthy` routing filter
prefers UP replicas whenever any is left, so a SUSPECT replica only takes requests when nothing
better exists); DOWN once `down_after` intervals pass, or at once when the link closes (not
routable; a shard group with a DOWN rank is not whole). The next heartbeat brings it back to UP.

Readiness (the engine can take requests) is not liveness: it comes with each load report
(`ready`) and the router reads it from the snapshot; a live but unready sidecar is UP here and
still not routable.
"""

from __future__ import annotations

import enum
import math
import random

from gateway.config.routing import HealthSettings

# Used when neither the config nor the sidecar gives a heartbeat interval.
FALLBACK_INTERVAL_S = 1.0
_MAX_DOUBLINGS = 62


class Health(enum.IntEnum):
    """Liveness, ordered from best to worst (a group is as healthy as its worst rank)."""

    UP = 0
    SUSPECT = 1
    DOWN = 2


def heartbeat_interval_s(settings: HealthSettings, announced_s: float) -> float:
    """The interval to judge a sidecar by: the configured one, else what the sidecar announced."""
    if settings.heartbeat_interval_s is not None:
        return settings.heartbeat_interval_s
    return announced_s if announced_s > 0 else FALLBACK_INTERVAL_S


class HeartbeatMonitor:
    """One sidecar's liveness. Starts DOWN: nothing is known until the first heartbeat.

    Heartbeats ride the link behind the deltas, so a busy link (or a busy gateway) delivers them
    late. A link that keeps delivering other messages is alive: missing heartbeats then make the
    sidecar SUSPECT (no new work while others are UP: its load is unknown), never DOWN. DOWN
    (its streams migrate) needs the whole link silent for the down window.
    """

    __slots__ = ("_active", "_down_s", "_last", "_suspect_s")

    def __init__(self, settings: HealthSettings, interval_s: float) -> None:
        self._suspect_s = 0.0
        self._down_s = 0.0
        self._last: float | None = None
        self._active: float | None = None
        self.configure(settings, interval_s)

    def configure(self, settings: HealthSettings, interval_s: float) -> None:
        """Adopt a new interval (the sidecar announced one) or new thresholds (config reload)."""
        self._suspect_s = settings.suspect_after_intervals * interval_s
        self._down_s = settings.down_after_intervals * interval_s

    def beat(self, now: float) -> None:
        """A load report arrived."""
        self._last = now
        self._active = now

    def activity(self, now: float) -> None:
        """Some other message (deltas) arrived on the link."""
        self._active = now

    def forgive(self, seconds: float) -> None:
        """The gateway itself was stalled this long (a paused process, a saturated loop): the
        silence it could not hear is not the sidecar's."""
        if self._last is not None:
            self._last += seconds
        if self._active is not None:
            self._active += seconds

    def lost(self) -> None:
        """The link closed: DOWN now, until the next heartbeat on a new link."""
        self._last = None
        self._active = None

    def state(self, now: float) -> Health:
        last = self._last
        if last is None:
            return Health.DOWN
        silent = now - last
        if silent >= self._down_s:
            active = self._active
            if active is not None and now - active < self._down_s:
                return Health.SUSPECT
            return Health.DOWN
        if silent >= self._suspect_s:
            return Health.SUSPECT
        return Health.UP

    def next_change(self, now: float) -> float | None:
        """When `state` will change if no heartbeat comes (None: it will not): a timer for the
        runtime, which re-assembles replicas when a sidecar's state changes."""
        last = self._last
        if last is None:
            return None
        if now - last < self._suspect_s:
            return last + self._suspect_s
        if now - last < self._down_s:
            return last + self._down_s
        active = self._active
        if active is not None and now - active < self._down_s:
            return active + self._down_s
        return None


def reconnect_delay_s(attempt: int, rng: random.Random, *, base_s: float, cap_s: float) -> float:
    """Delay before reconnect `attempt` (0 for the first retry): "equal jitter" exponential
    backoff, uniform in [d/2, d] with d = min(cap, base * 2**attempt). Never above the cap, never
    near zero (a dead sidecar is not hammered), and reconnects from many gateways spread out."""
    d = min(cap_s, math.ldexp(base_s, min(max(attempt, 0), _MAX_DOUBLINGS)))
    return d * (0.5 + 0.5 * rng.random())
