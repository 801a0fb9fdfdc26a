"""Budgets in dollars over a window that resets: reserve a request's worst case at admission,
settle its real cost when it ends.

A window is LiteLLM's `budget_duration`: "30s", "15m", "12h", "30d", "1mo" (calendar months,
UTC). It starts when the budget is made and resets every duration after that. A request is
admitted while the spent and the reserved together stay below the budget: the budget is never
passed by more than the last admitted request's reserve.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

_DURATION: Final = re.compile(r"^(\d{1,6})(s|m|h|d|mo)$")
MAX_SECONDS: Final = 10 * 366 * 86400  # ten years at most
_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True, slots=True)
class Duration:
    count: int
    unit: str  # s, m, h, d, mo

    def after(self, t: float) -> float:
        """The Unix time one duration after `t`."""
        if self.unit != "mo":
            return t + self.count * _SECONDS[self.unit]
        d = datetime.fromtimestamp(t, UTC)
        month = d.month - 1 + self.count
        year, month = d.year + month // 12, month % 12 + 1
        day = min(d.day, calendar.monthrange(year, month)[1])
        return d.replace(year=year, month=month, day=day).timestamp()


def parse_duration(text: str) -> Duration:
    """ "30d" -> Duration(30, "d"); ValueError naming the forms otherwise."""
    m = _DURATION.match(text.strip())
    if m is None or int(m.group(1)) == 0:
        raise ValueError(f"{text!r} is not a duration: use e.g. 30s, 15m, 12h, 30d or 1mo")
    d = Duration(int(m.group(1)), m.group(2))
    if d.after(0.0) > MAX_SECONDS:
        raise ValueError(f"{text!r} is longer than ten years")
    return d


def next_reset(window: Duration, reset_at: float, now: float) -> float:
    """The first reset after `now` of a window that reset (or was due to) at `reset_at`."""
    if reset_at > now:
        return reset_at
    if window.unit != "mo":  # a fixed length: no loop over the windows that passed
        step = window.after(0.0)
        return reset_at + (int((now - reset_at) // step) + 1) * step
    t = reset_at
    while t <= now:  # (months: at most one turn a month since the last reset)
        t = window.after(t)
    return t


class Budget:
    """One key's or team's budget: `limit` None means none (its spend is still counted)."""

    __slots__ = ("limit", "pending", "reserved", "reset_at", "rolled", "spent", "window")

    def __init__(
        self,
        limit: float | None,
        window: Duration | None,
        reset_at: float | None,
        spent: float = 0.0,
    ) -> None:
        self.limit = limit
        self.window = window
        self.reset_at = reset_at
        self.spent = spent  # settled in the current window, as the store last said plus `pending`
        self.pending = 0.0  # settled here, not yet in the store
        self.reserved = 0.0  # admitted requests' worst cases, not yet settled
        self.rolled: tuple[float | None, float] | None = None  # a reset to write: (old, new)

    def roll(self, now: float) -> None:
        """Start a new window if the current one is over."""
        w, at = self.window, self.reset_at
        if w is None or at is None or now < at:
            return
        new = next_reset(w, at, now)
        self.rolled = (at if self.rolled is None else self.rolled[0], new)
        self.reset_at = new
        self.spent = self.pending = 0.0

    def allows(self, now: float) -> bool:
        self.roll(now)
        return self.limit is None or self.spent + self.reserved < self.limit

    def reserve(self, usd: float) -> None:
        self.reserved += usd

    def settle(self, reserved: float, usd: float, now: float) -> None:
        """A request ended: its reserve is let go, its cost counted in the window of `now`."""
        self.reserved = max(0.0, self.reserved - reserved)
        self.roll(now)
        self.spent += usd
        self.pending += usd

    def stored(self, spent: float, reset_at: float | None) -> None:
        """The store's figures, read afresh: what is settled here and not yet written stays."""
        if reset_at is not None and self.reset_at is not None and reset_at < self.reset_at:
            return  # the store has not had this window's reset yet: it is queued
        self.reset_at = reset_at
        self.spent = spent + self.pending

    def written(self, usd: float) -> None:
        """`usd` of what was settled here is in the store now."""
        self.pending = max(0.0, self.pending - usd)
