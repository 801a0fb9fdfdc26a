"""A routing profile: filters -> weighted scorers -> picker, built from config by registries.

A registry maps a type name to a params type (a msgspec Struct, checked when the profile is
built) and a factory. `route` runs the filters in order (stopping at the first that leaves
nothing), adds up score x weight per replica, lets the picker choose, and tells the scorers
which replica was chosen (prefix affinity remembers it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Generic, TypeVar

import msgspec

from gateway.config.routing import ProfileSpec
from gateway.policy.routing import filters, pickers, scorers
from gateway.policy.routing.plugin import Filter, Params, Picker, PluginEnv, Scorer
from gateway.policy.routing.snapshot import Replica, RequestFeatures

P = TypeVar("P")
S = TypeVar("S", bound=Params)


class Registry(Generic[P]):
    """Type name -> (params type, factory) for one kind of plugin."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, tuple[type[Params], Callable[[Any, PluginEnv], P]]] = {}

    def register(self, name: str, params: type[S], factory: Callable[[S, PluginEnv], P]) -> None:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = (params, factory)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def build(self, name: str, params: Mapping[str, Any], env: PluginEnv, where: str) -> P:
        entry = self._entries.get(name)
        if entry is None:
            known = ", ".join(self.names())
            raise ValueError(f"{where}.type: unknown {self.kind} {name!r} (known: {known})")
        params_type, factory = entry
        try:
            p = msgspec.convert(params, params_type)
        except msgspec.ValidationError as e:
            raise ValueError(f"{where}.params: {e}") from None
        return factory(p, env)


FILTERS: Registry[Filter] = Registry("filter")
FILTERS.register("serves", Params, lambda p, env: filters.Serves())
FILTERS.register("healthy", filters.HealthyParams, lambda p, env: filters.Healthy(p))
FILTERS.register(
    "not_ejected", filters.NotEjectedParams, lambda p, env: filters.NotEjected(p, env.outliers)
)
FILTERS.register("free_slot", Params, lambda p, env: filters.FreeSlot())

SCORERS: Registry[Scorer] = Registry("scorer")
SCORERS.register("load", Params, lambda p, env: scorers.Load())
SCORERS.register("kv_usage", Params, lambda p, env: scorers.KvUsage())
SCORERS.register("prefix", scorers.PrefixParams, lambda p, env: scorers.Prefix(p, env.caches))
SCORERS.register(
    "precise_prefix",
    scorers.PrecisePrefixParams,
    lambda p, env: scorers.PrecisePrefix(p, env.caches),
)
SCORERS.register("session", scorers.SessionParams, lambda p, env: scorers.Session(p))

PICKERS: Registry[Picker] = Registry("picker")
PICKERS.register("max_score", Params, lambda p, env: pickers.MaxScore(env.rng))
PICKERS.register("random", Params, lambda p, env: pickers.Random(env.rng))


class Profile:
    __slots__ = ("filters", "name", "picker", "scorers")

    def __init__(
        self,
        name: str,
        filters: Sequence[Filter],
        scorers: Sequence[tuple[Scorer, float]],
        picker: Picker,
    ) -> None:
        self.name = name
        self.filters = tuple(filters)
        self.scorers = tuple((s, w) for s, w in scorers if w > 0)  # weight 0: switched off
        self.picker = picker

    def route(
        self,
        req: RequestFeatures,
        replicas: Sequence[Replica],
        now: float,
        exclude: Collection[str] = (),
    ) -> Replica | None:
        """The replica for `req` among `replicas` (its model's pool), skipping the names in
        `exclude` (replicas this request already tried); None when no replica qualifies."""
        cands = self._candidates(req, replicas, now, exclude)
        if not cands:
            return None
        choice = (
            cands[0] if len(cands) == 1 else cands[self.picker.pick(self.scores(req, cands, now))]
        )
        self._picked(req, choice, now)
        return choice

    def ranked(
        self,
        req: RequestFeatures,
        replicas: Sequence[Replica],
        now: float,
        exclude: Collection[str] = (),
    ) -> list[Replica]:
        """Every qualifying replica, best first: `route`'s choice, then the rest by total score
        (ties in pool order): the fallbacks for retries if the runtime wants the list at once."""
        cands = self._candidates(req, replicas, now, exclude)
        if len(cands) <= 1:
            if cands:
                self._picked(req, cands[0], now)
            return list(cands)
        totals = self.scores(req, cands, now)
        first = self.picker.pick(totals)
        rest = sorted(range(len(cands)), key=totals.__getitem__, reverse=True)
        self._picked(req, cands[first], now)
        return [cands[first], *(cands[i] for i in rest if i != first)]

    def scores(self, req: RequestFeatures, cands: Sequence[Replica], now: float) -> list[float]:
        """The weighted total per candidate (what the picker sees)."""
        totals = [0.0] * len(cands)
        for scorer, weight in self.scorers:
            for i, v in enumerate(scorer.score(req, cands, now)):
                totals[i] += weight * v
        return totals

    def _candidates(
        self,
        req: RequestFeatures,
        replicas: Sequence[Replica],
        now: float,
        exclude: Collection[str],
    ) -> Sequence[Replica]:
        cands = [r for r in replicas if r.name not in exclude] if exclude else replicas
        for f in self.filters:
            if not cands:
                break
            cands = f.filter(req, cands, now)
        return cands

    def _picked(self, req: RequestFeatures, choice: Replica, now: float) -> None:
        for scorer, _ in self.scorers:
            scorer.picked(req, choice, now)


def build_profile(spec: ProfileSpec, env: PluginEnv) -> Profile:
    """Build a profile from config; ValueError names the bad field (`routing.profile...`)."""
    where = "routing.profile"
    return Profile(
        spec.name,
        [
            FILTERS.build(f.type, f.params, env, f"{where}.filters[{i}]")
            for i, f in enumerate(spec.filters)
        ],
        [
            (SCORERS.build(s.type, s.params, env, f"{where}.scorers[{i}]"), s.weight)
            for i, s in enumerate(spec.scorers)
        ],
        PICKERS.build(spec.picker.type, spec.picker.params, env, f"{where}.picker"),
    )
