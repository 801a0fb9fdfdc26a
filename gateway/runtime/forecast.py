"""Each replica's predicted time to first token and time per output token, from its own recent
figures (gateway/policy/linear.py: least squares over a sliding window).

- TTFT, from placement to the first token: 1, the requests on the replica when it was placed
  (the batch it joins), its own uncached prompt tokens, those of the requests placed there
  before it that have not begun, and the replica's recent prefill rate (uncached tokens placed
  on it per second, decayed over `_RATE_S`): the step under way when it arrives, which it
  waits for, is mostly other requests' prefill. Tokens in thousands.
- TPOT, from the first token to the last: 1, that batch size, and that prefill rate (the
  prefill of the requests that join while it decodes lengthens its steps).

A request's own uncached tokens are its prompt (the gateway's estimate) less what precise
prefix routing found the replica holds; with no such match, less the replica's recent share
of prompt tokens served from cache (its engines' usage reports). Models learn from requests
that finished on the replica they were first placed on; an ended request leaves nothing here
(`drop`).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from gateway.policy.linear import OnlineLinear

if TYPE_CHECKING:
    from gateway.runtime.job import Job

# How fast a replica's share of cached prompt tokens follows its reports.
_CACHED_ALPHA = 0.1
# The time constant of a replica's prefill rate.
_RATE_S = 2.0


class Forecast:
    """What was predicted for one placement, and from what."""

    __slots__ = (
        "attempt",
        "observed_tpot_s",
        "observed_ttft_s",
        "placed_at",
        "replica",
        "tpot_s",
        "tpot_x",
        "ttft_s",
        "ttft_x",
    )

    def __init__(
        self,
        replica: str,
        attempt: int,
        placed_at: float,
        ttft_x: tuple[float, ...],
        tpot_x: tuple[float, ...],
        ttft_s: float | None,
        tpot_s: float | None,
    ) -> None:
        self.replica = replica
        self.attempt = attempt
        self.placed_at = placed_at
        self.ttft_x = ttft_x
        self.tpot_x = tpot_x
        self.ttft_s = ttft_s
        self.tpot_s = tpot_s
        # What its engine did (set once it finished where it was placed; None: not known).
        self.observed_ttft_s: float | None = None
        self.observed_tpot_s: float | None = None


class _Replica:
    __slots__ = ("_rate", "_rate_at", "cached_share", "pending", "tpot", "ttft")

    def __init__(self, window: int) -> None:
        self.ttft = OnlineLinear(5, window)
        self.tpot = OnlineLinear(3, window)
        self.cached_share = 0.0
        self.pending: list[tuple[Job, int, int]] = []  # (job, its attempt, uncached tokens)
        self._rate = 0.0  # uncached tokens placed per second, decayed
        self._rate_at = 0.0

    def rate(self, now: float, add: int = 0) -> float:
        """The prefill rate now, in thousands of tokens per second (`add`: just placed)."""
        if self._rate_at:
            self._rate *= math.exp(-(now - self._rate_at) / _RATE_S)
        self._rate_at = now
        self._rate += add / _RATE_S
        return self._rate / 1000.0

    def features(
        self, name: str, running: int, own: int, now: float, add: bool
    ) -> tuple[tuple[float, ...], tuple[float, ...]]:
        rate = self.rate(now, own if add else 0)
        r = float(running)
        ttft = (1.0, r, own / 1000.0, self.pending_tokens(name) / 1000.0, rate)
        return ttft, (1.0, r, rate)

    def pending_tokens(self, name: str) -> int:
        """Prompt tokens placed here whose request has not begun (pruned as they begin)."""
        keep = []
        total = 0
        for item in self.pending:
            job, attempt, tokens = item
            if job.began or job.attempt != attempt or job.replica != name or not job.link:
                continue
            keep.append(item)
            total += tokens
        self.pending = keep
        return total


class Forecasts:
    __slots__ = ("_replicas", "_window")

    def __init__(self, window: int = 128) -> None:
        self._window = window
        self._replicas: dict[str, _Replica] = {}

    def _get(self, name: str) -> _Replica:
        r = self._replicas.get(name)
        if r is None:
            r = self._replicas[name] = _Replica(self._window)
        return r

    def drop(self, name: str, job: Job) -> None:
        """`job` ended: it is no longer pending on `name` (nothing keeps an ended job)."""
        r = self._replicas.get(name)
        if r is not None and r.pending:
            r.pending = [p for p in r.pending if p[0] is not job]

    def uncached(self, name: str, prompt_tokens: int, cached: int | None) -> int:
        r = self._replicas.get(name)
        if cached is None:
            share = r.cached_share if r is not None else 0.0
            cached = int(prompt_tokens * share)
        return max(0, prompt_tokens - cached)

    def ttft(self, name: str, running: int, own_tokens: int) -> float | None:
        """The predicted TTFT of a request placed on `name` now (None: not learned yet)."""
        r = self._replicas.get(name)
        if r is None or not r.ttft.ready:
            return None
        x, _ = r.features(name, running, own_tokens, time.monotonic(), False)
        return r.ttft.predict(x)

    def best_ttft(self, names: list[tuple[str, int]], prompt_tokens: int) -> float | None:
        """The least predicted TTFT over (replica, requests on it) candidates: what a request
        that waits for a slot may hope for (None: no candidate has learned)."""
        best = math.inf
        for name, running in names:
            t = self.ttft(name, running, self.uncached(name, prompt_tokens, None))
            if t is not None and t < best:
                best = t
        return None if best == math.inf else best

    def place(
        self, job: Job, name: str, running: int, prompt_tokens: int, cached: int | None, now: float
    ) -> Forecast:
        """The job was just placed on `name` with `running` requests there before it."""
        r = self._get(name)
        own = self.uncached(name, prompt_tokens, cached)
        ttft_x, tpot_x = r.features(name, running, own, now, True)
        r.pending.append((job, job.attempt, own))
        return Forecast(
            name, job.attempt, now, ttft_x, tpot_x, r.ttft.predict(ttft_x), r.tpot.predict(tpot_x)
        )

    def finished(self, job: Job, f: Forecast) -> None:
        """Learn from a job that finished where `f` placed it; `f` keeps the observed TTFT and
        TPOT of the engine part (where they can be told)."""
        r = self._replicas.get(f.replica)
        if r is None or job.attempt != f.attempt or job.replica != f.replica:
            return
        if job.prompt_tokens:
            share = min(1.0, job.cached_tokens / job.prompt_tokens)
            r.cached_share += _CACHED_ALPHA * (share - r.cached_share)
        if job.first_token_at >= f.placed_at:
            f.observed_ttft_s = job.first_token_at - f.placed_at
            r.ttft.observe(f.ttft_x, f.observed_ttft_s)
        n = len(job.generated)
        moved = job.preemptions or job.migrations  # (its gaps hold a pause)
        if n >= 2 and job.last_token_at > job.first_token_at and not moved:
            f.observed_tpot_s = (job.last_token_at - job.first_token_at) / (n - 1)
            r.tpot.observe(f.tpot_x, f.observed_tpot_s)
