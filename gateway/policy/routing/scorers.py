"""Scorers: how good each replica is for this request, in [0, 1] (the profile weighs them).

Affinity scorers (prefix, session) honour a load bound, after consistent hashing with bounded
loads: a replica counts for affinity only while, given this request, its requests per slot stay
within (1 + load_epsilon) x the candidates' mean plus `load_slack`:

    requests + 1 <= ceil(((1 + epsilon) x (all requests + 1) / all slots + slack) x its slots)

With slack 0 this is the CHWBL bound (weighted by slots). The slack (a share of the replica's
slots) keeps affinity at low load, where a few requests more on one replica cost little and a
lost prefix cache costs a whole prefill; the relative part rules at high load. So one hot prefix
or session cannot pile onto one replica. (The `free_slot` filter runs first: a full replica is
never chosen for affinity while another has a free slot.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated

import msgspec
from shardgate.v1.kvblocks import block_names, start

from gateway.policy.routing.engine_cache import EngineCaches
from gateway.policy.routing.hashing import mix64, str_hash64
from gateway.policy.routing.plugin import Params
from gateway.policy.routing.prefix import PrefixIndex
from gateway.policy.routing.snapshot import Replica, RequestFeatures

Share = Annotated[float, msgspec.Meta(ge=0)]


def load_bound(replicas: Sequence[Replica], epsilon: float, slack: float) -> float:
    """Requests one slot may hold, this request included, under the bound."""
    requests = slots = 0
    for r in replicas:
        requests += r.requests
        slots += r.max_num_seqs or 1
    return (1.0 + epsilon) * (requests + 1) / (slots or 1) + slack


def within(r: Replica, bound: float) -> bool:
    # The tolerance keeps float error (2.0000000000000004) from granting a request more.
    return r.requests + 1 <= math.ceil(bound * (r.max_num_seqs or 1) - 1e-9)


class BoundParams(Params, frozen=True, forbid_unknown_fields=True, kw_only=True):
    load_epsilon: Share | None = 0.25  # None: no load bound
    load_slack: Share = 0.1


class Load:
    """Least loaded: 1 / (1 + occupancy), where occupancy is requests (running, ours in flight
    if more, plus waiting) over slots. Strictly decreasing, so alone it picks the least-loaded
    replica, and a queueing replica (occupancy > 1) still ranks below a full one."""

    __slots__ = ()

    def score(self, req: RequestFeatures, replicas: Sequence[Replica], now: float) -> list[float]:
        return [1.0 / (1.0 + r.occupancy) for r in replicas]

    def picked(self, req: RequestFeatures, replica: Replica, now: float) -> None:
        pass


class KvUsage:
    """Free KV cache: 1 - kv_usage (from the last load report)."""

    __slots__ = ()

    def score(self, req: RequestFeatures, replicas: Sequence[Replica], now: float) -> list[float]:
        return [1.0 - min(1.0, max(0.0, r.kv_usage)) for r in replicas]

    def picked(self, req: RequestFeatures, replica: Replica, now: float) -> None:
        pass


def _bounded(scores: list[float], replicas: Sequence[Replica], params: BoundParams) -> list[float]:
    """`scores` with 0 for the replicas above the load bound."""
    eps = params.load_epsilon
    if eps is not None:
        bound = load_bound(replicas, eps, params.load_slack)
        for i, r in enumerate(replicas):
            if scores[i] and not within(r, bound):
                scores[i] = 0.0
    return scores


class PrecisePrefixParams(BoundParams, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


class PrecisePrefix:
    """Prefix affinity on what the engines really cache: the share of the request's prompt
    tokens whose KV blocks the replica's engine holds as a leading run (its KV events, in
    `EngineCaches`), or was just sent (a short-lived guess); 0 above the load bound. A replica
    is matched at its own block size, so replicas with different sizes compare in tokens.

    Requests whose prompt the gateway could not tokenize, and replicas that report nothing,
    score 0 here: the approximate `prefix` scorer is the one for them."""

    __slots__ = ("_last", "caches", "params")

    def __init__(self, params: BoundParams, caches: EngineCaches | None) -> None:
        self.params = params
        self.caches = caches or EngineCaches()
        self._last: tuple[RequestFeatures, Sequence[Replica], list[int]] | None = None

    def covers(self, req: RequestFeatures, replicas: Sequence[Replica]) -> bool:
        """The request's prompt is known and every replica reports its cache."""
        if not req.prompt_ids:
            return False
        sizes = self.caches.block_sizes
        return all(r.head in sizes for r in replicas)

    def names(self, req: RequestFeatures, block_size: int) -> list[int]:
        names = req.kv_names.get(block_size)
        if names is None:
            ids = req.prompt_ids or ()
            names = req.kv_names[block_size] = block_names(
                ids, block_size, start(req.model, req.lora)
            )
        return names

    def cached_tokens(
        self, req: RequestFeatures, replicas: Sequence[Replica], now: float
    ) -> list[int]:
        """Per replica, the prompt tokens its engine holds (or was just sent) as a leading run
        of blocks."""
        sizes, index = self.caches.block_sizes, self.caches.index
        by_size: dict[int, dict[str, int]] = {}
        out = []
        for r in replicas:
            bs = sizes.get(r.head, 0)
            if not bs:
                out.append(0)
                continue
            held = by_size.get(bs)
            if held is None:
                held = by_size[bs] = index.matched(self.names(req, bs), now)
            out.append(held.get(r.head, 0) * bs)
        return out

    def score(self, req: RequestFeatures, replicas: Sequence[Replica], now: float) -> list[float]:
        if not req.prompt_ids:
            return [0.0] * len(replicas)
        tokens = self.cached_tokens(req, replicas, now)
        self._last = (req, replicas, tokens)
        total = len(req.prompt_ids)
        return _bounded([t / total for t in tokens], replicas, self.params)

    def picked(self, req: RequestFeatures, replica: Replica, now: float) -> None:
        if not req.prompt_ids:
            return
        last, self._last = self._last, None
        if last is not None and last[0] is req:
            _, cands, tokens = last
            chosen = next((t for r, t in zip(cands, tokens, strict=True) if r is replica), 0)
            self.caches.routed(chosen, max(tokens))
            req.routed[replica.head] = chosen
        bs = self.caches.block_sizes.get(replica.head, 0)
        if bs:
            self.caches.index.speculate(replica.head, self.names(req, bs), now)


class PrefixParams(BoundParams, frozen=True, forbid_unknown_fields=True, kw_only=True):
    index_capacity: Annotated[int, msgspec.Meta(ge=1)] = 100_000  # block hashes per model pool
    owners_per_block: Annotated[int, msgspec.Meta(ge=1, le=16)] = 4
    # Score on what the engines report they cache (`precise_prefix`) whenever the request's
    # prompt could be tokenized and every candidate replica reports its cache.
    engine_events: bool = True


class Prefix:
    """Prefix affinity: the share of the request's prefix blocks that the replica was last sent
    (by this gateway: a `PrefixIndex` per model pool, fed by `picked`); 0 above the load bound.

    With `engine_events`, a request whose candidates all report their caches is scored by
    `PrecisePrefix` instead (what the engines hold, not what this gateway sent)."""

    __slots__ = ("indexes", "params", "precise")

    def __init__(self, params: PrefixParams, caches: EngineCaches | None = None) -> None:
        self.params = params
        self.indexes: dict[str, PrefixIndex] = {}
        self.precise = PrecisePrefix(params, caches) if params.engine_events and caches else None

    def score(self, req: RequestFeatures, replicas: Sequence[Replica], now: float) -> list[float]:
        precise = self.precise
        if precise is not None and precise.covers(req, replicas):
            return precise.score(req, replicas, now)
        return self.approximate(req, replicas)

    def approximate(self, req: RequestFeatures, replicas: Sequence[Replica]) -> list[float]:
        hashes = req.prefix_hashes
        index = self.indexes.get(req.model) if hashes else None
        seen = index.match(hashes) if index is not None else None
        if not seen:
            return [0.0] * len(replicas)
        total = len(hashes)
        return _bounded([seen.get(r.name, 0) / total for r in replicas], replicas, self.params)

    def picked(self, req: RequestFeatures, replica: Replica, now: float) -> None:
        if self.precise is not None:
            self.precise.picked(req, replica, now)
        if not req.prefix_hashes:
            return
        index = self.indexes.get(req.model)
        if index is None:
            p = self.params
            index = self.indexes[req.model] = PrefixIndex(p.index_capacity, p.owners_per_block)
        index.record(req.prefix_hashes, replica.name)


class SessionParams(BoundParams, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


def rendezvous(session_key: int, replicas: Sequence[Replica], bound: float | None = None) -> int:
    """Highest-random-weight choice (-1 if none is within `bound`): adding or removing a
    replica moves only the sessions that gain or lose it (about 1/n of them)."""
    best, best_w = -1, -1
    for i, r in enumerate(replicas):
        if bound is not None and not within(r, bound):
            continue
        w = mix64(session_key ^ r.key)
        if w > best_w:
            best, best_w = i, w
    return best


class Session:
    """Session affinity: 1 for the rendezvous-hash choice of `x-session-id` among the
    replicas within the load bound (among all if none is), 0 for the others."""

    __slots__ = ("params",)

    def __init__(self, params: SessionParams) -> None:
        self.params = params

    def score(self, req: RequestFeatures, replicas: Sequence[Replica], now: float) -> list[float]:
        scores = [0.0] * len(replicas)
        if not req.session_id or not replicas:
            return scores
        key = str_hash64(req.session_id)
        best = -1
        eps = self.params.load_epsilon
        if eps is not None:
            best = rendezvous(key, replicas, load_bound(replicas, eps, self.params.load_slack))
        if best < 0:
            best = rendezvous(key, replicas)
        scores[best] = 1.0
        return scores

    def picked(self, req: RequestFeatures, replica: Replica, now: float) -> None:
        pass
