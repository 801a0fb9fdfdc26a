"""Passive outlier ejection, as Envoy's consecutive-5xx detector does it.

The runtime reports each attempt's outcome. `consecutive_failures` failures in a row eject the
replica for `base_ejection_time_s` x its multiplier, capped at `max_ejection_time_s`. The
multiplier goes up by one per ejection (while base x multiplier < max + base, as Envoy) and down
by one for each `decay_interval_s` the replica then spends un-ejected, so a replica that keeps
failing stays out longer and longer, and one that recovered is soon forgiven. A success resets
the consecutive count; so does a detection, ejected or not (Envoy resets after a detection, so a
detection refused by the cap needs a fresh run of failures). Outcomes reported while ejected
(requests that were already running) are ignored. An ejection ends exactly at its time.
Another detector may eject a replica at once (`eject`: its engine stalled), with the same
multiplier and cap, as if its run of failures had just completed.

The cap (Envoy >= 1.31, with a floor): a replica is ejected only while fewer than
`ejectable(size)` of its pool of `size` live replicas are: floor(size x max_ejection_percent /
100), at least one with `always_eject_one` (Envoy's `always_eject_one_host`), and never the last
one (at most size - 1). Live means not DOWN: a lost link is not an ejection, so it is neither
counted nor counted against. The runtime passes the pool (the live replicas of the model's pool);
a replica serving several models is ejected only if every pool's cap allows it. `panic` is the
other half of the floor (Envoy's healthy panic threshold): when too few of the replicas routing
may use are un-ejected, routing uses them all.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

from gateway.config.routing import EjectionSettings


@dataclass(slots=True)
class _Replica:
    consecutive: int = 0
    until: float = 0.0  # ejected until then (0: not ejected)
    multiplier: int = 0  # Envoy's ejectTimeBackoff
    released_at: float | None = None  # when the last ejection ended


def ejectable(size: int, max_percent: float, always_one: bool) -> int:
    """How many of a pool of `size` live replicas may be ejected at once."""
    if size <= 1:
        return 0
    allowed = math.floor(size * max_percent / 100.0 + 1e-9)
    if always_one:
        allowed = max(allowed, 1)
    return min(allowed, size - 1)


def panic(healthy: int, total: int, threshold_percent: float) -> bool:
    """Whether `healthy` un-ejected replicas of `total` are below the panic threshold."""
    return total > 0 and 100.0 * healthy < threshold_percent * total


class OutlierDetector:
    """Ejection state of every replica of the fleet, keyed by replica name."""

    __slots__ = ("_active", "_replicas", "_soonest", "settings")

    def __init__(self, settings: EjectionSettings) -> None:
        self.settings = settings
        self._replicas: dict[str, _Replica] = {}
        self._active: dict[str, float] = {}  # ejected name -> until (may hold expired ones)
        self._soonest = math.inf  # no ejection in `_active` ends before this

    # -- what routing reads -----------------------------------------------------------------
    def any_ejected(self, now: float) -> bool:
        """Whether any replica is ejected now (routing's fast path skips the filter if not)."""
        if now >= self._soonest:
            self._release_all_due(now)
        return bool(self._active)

    def is_ejected(self, name: str, now: float) -> bool:
        until = self._active.get(name)
        return until is not None and until > now

    def ejected_until(self, name: str, now: float) -> float | None:
        until = self._active.get(name)
        return until if until is not None and until > now else None

    # -- outcomes ---------------------------------------------------------------------------
    def success(self, name: str, now: float) -> None:
        r = self._replicas.get(name)
        if r is not None:
            self._release_if_due(name, r, now)
            r.consecutive = 0

    def failure(self, name: str, now: float, pool: Collection[str]) -> float | None:
        """Count a server-side failure; returns the ejection's end when this one ejects it."""
        s = self.settings
        r = self._replicas.get(name)
        if r is None:
            r = self._replicas[name] = _Replica()
        self._release_if_due(name, r, now)
        if r.until > now or not s.enabled:
            return None
        r.consecutive += 1
        if r.consecutive < s.consecutive_failures:
            return None
        return self._detected(name, r, now, (pool,))

    def eject(
        self, name: str, now: float, pool: Collection[str], *pools: Collection[str]
    ) -> float | None:
        """A detection from elsewhere (the replica's engine stalled): eject it now, as a
        completed run of failures would, if the cap of each pool it serves allows it. Returns
        the ejection's end, or None (already ejected, ejection off, or refused by the cap)."""
        r = self._replicas.get(name)
        if r is None:
            r = self._replicas[name] = _Replica()
        self._release_if_due(name, r, now)
        if r.until > now or not self.settings.enabled:
            return None
        return self._detected(name, r, now, (pool, *pools))

    def forget(self, name: str) -> None:
        """The replica left the fleet."""
        self._replicas.pop(name, None)
        self._active.pop(name, None)

    # -- internals --------------------------------------------------------------------------
    def _detected(
        self, name: str, r: _Replica, now: float, pools: tuple[Collection[str], ...]
    ) -> float | None:
        s = self.settings
        r.consecutive = 0
        if now >= self._soonest:
            self._release_all_due(now)
        if not all(self._cap_allows(name, pool) for pool in pools):
            return None
        if r.released_at is not None:
            r.multiplier = max(0, r.multiplier - int((now - r.released_at) // s.decay_interval_s))
            r.released_at = None
        base, cap = s.base_ejection_time_s, s.max_ejection_time_s
        if r.multiplier * base < cap + base:
            r.multiplier += 1
        r.until = now + min(base * r.multiplier, cap)
        self._active[name] = r.until
        self._soonest = min(self._soonest, r.until)
        return r.until

    def _release_if_due(self, name: str, r: _Replica, now: float) -> None:
        if r.until and r.until <= now:
            r.released_at = r.until
            r.until = 0.0
            r.consecutive = 0
            self._active.pop(name, None)

    def _release_all_due(self, now: float) -> None:
        for name, until in list(self._active.items()):
            if until <= now:
                self._release_if_due(name, self._replicas[name], now)
        self._soonest = min(self._active.values(), default=math.inf)

    def _cap_allows(self, name: str, pool: Collection[str]) -> bool:
        s = self.settings
        size = len(pool) if name in pool else len(pool) + 1  # it is live, or about to be
        ejected = sum(1 for other in self._active if other != name and other in pool)
        return ejected < ejectable(size, s.max_ejection_percent, s.always_eject_one)
