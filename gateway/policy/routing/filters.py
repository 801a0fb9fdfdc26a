"""Filters: which replicas may take this request. Each keeps the order it was given."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.policy.ejection import OutlierDetector, panic
from gateway.policy.health import Health
from gateway.policy.routing.plugin import Params
from gateway.policy.routing.snapshot import Replica, RequestFeatures


class Serves:
    """Serves the requested model, and the requested LoRA adapter if there is one."""

    __slots__ = ()

    def filter(
        self, req: RequestFeatures, replicas: Sequence[Replica], now: float
    ) -> Sequence[Replica]:
        model, lora = req.model, req.lora
        if lora:
            keep = [r for r in replicas if lora in r.loras.get(model, ())]
        else:
            keep = [r for r in replicas if model in r.models]
        return replicas if len(keep) == len(replicas) else keep


class HealthyParams(Params, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # Keep SUSPECT replicas only when no UP one is left.
    prefer_up: bool = True


class Healthy:
    """Routable: whole shard group, every rank ready and not DOWN. SUSPECT replicas (heartbeats
    late) are dropped while any UP replica remains, and kept when none does."""

    __slots__ = ("prefer_up",)

    def __init__(self, params: HealthyParams) -> None:
        self.prefer_up = params.prefer_up

    def filter(
        self, req: RequestFeatures, replicas: Sequence[Replica], now: float
    ) -> Sequence[Replica]:
        keep = [r for r in replicas if r.whole and r.ready and r.health is not Health.DOWN]
        if self.prefer_up and any(r.health is Health.SUSPECT for r in keep):
            up = [r for r in keep if r.health is Health.UP]
            if up:
                keep = up
        return replicas if len(keep) == len(replicas) else keep


class NotEjectedParams(Params, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # When every candidate is ejected, keep them all (Envoy's panic routing): a request to a
    # replica that failed lately beats a certain 503.
    keep_all_if_none: bool = True


class NotEjected:
    """Not ejected by outlier detection (`ejection.OutlierDetector`) at `now`. Ejection never
    empties a pool: when the un-ejected share of the routable replicas it is given falls below
    the detector's `healthy_panic_threshold` (Envoy's panic routing), or none is left, it keeps
    them all. DOWN ones are no ejection and do not count; SUSPECT ones do, so it runs before
    `healthy` (as in the default profile), whose preference for UP replicas would hide them."""

    __slots__ = ("keep_all_if_none", "outliers")

    def __init__(self, params: NotEjectedParams, outliers: OutlierDetector | None) -> None:
        self.keep_all_if_none = params.keep_all_if_none
        self.outliers = outliers

    def filter(
        self, req: RequestFeatures, replicas: Sequence[Replica], now: float
    ) -> Sequence[Replica]:
        o = self.outliers
        if o is None or not o.any_ejected(now):
            return replicas
        keep = [r for r in replicas if not o.is_ejected(r.name, now)]
        if len(keep) == len(replicas):
            return replicas
        live = sum(1 for r in replicas if r.routable)
        healthy = sum(1 for r in keep if r.routable)
        if not healthy and self.keep_all_if_none:
            return replicas
        if panic(healthy, live, o.settings.healthy_panic_threshold):
            return replicas
        return keep


class FreeSlot:
    """Has a free slot (fewer requests than max_num_seqs). When none has, all are kept, so the
    request queues where the scorers say (by default: the least loaded)."""

    __slots__ = ()

    def filter(
        self, req: RequestFeatures, replicas: Sequence[Replica], now: float
    ) -> Sequence[Replica]:
        keep = [r for r in replicas if r.requests < r.max_num_seqs]
        return replicas if not keep or len(keep) == len(replicas) else keep
