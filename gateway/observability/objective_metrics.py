"""Goodput and prediction error: how many requests met their latency targets, and how far the
scheduler's predictions were from what happened.

- `shardgate_objective_requests_total{model, tenant, class, result}`: requests that carried a
  target, by `result`: `met` (finished, and within every target it had: goodput), `missed`
  (finished or failed outside one), `refused` (shed or rejected before it ran).
- `shardgate_prediction_error_ratio{model, figure}`: |predicted - observed| / observed of the
  engine part of a placement, `figure` `ttft` (placement to first token) or `tpot`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter

from gateway.observability.histogram import LoopHistogram
from gateway.observability.labels import class_label
from gateway.types import Objective

ERROR_BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0)


class Result(enum.StrEnum):
    MET = "met"
    MISSED = "missed"
    REFUSED = "refused"


def judge(
    objective: Objective,
    finished: bool,
    ttft_s: float | None,
    tpot_s: float | None,
) -> Result:
    """A request's result against its targets (`finished`: it ran to its end)."""
    if not finished:
        return Result.MISSED
    if objective.ttft_s is not None and (ttft_s is None or ttft_s > objective.ttft_s):
        return Result.MISSED
    if objective.tpot_s is not None and tpot_s is not None and tpot_s > objective.tpot_s:
        return Result.MISSED
    return Result.MET


class ObjectiveMetrics:
    def __init__(
        self,
        registry: CollectorRegistry,
        model: Callable[[str], str],
        tenant: Callable[[str], str],
    ) -> None:
        self._model = model
        self._tenant = tenant
        self._requests = Counter(
            "shardgate_objective_requests",
            "Requests with latency targets, by whether they met them (met = goodput).",
            ["model", "tenant", "class", "result"],
            registry=registry,
        )
        self._error = LoopHistogram(
            "shardgate_prediction_error_ratio",
            "|predicted - observed| / observed, engine part of TTFT and TPOT.",
            ["model", "figure"],
            ERROR_BUCKETS,
        )
        registry.register(self._error)

    def request(self, model: str, tenant: str, klass: int, result: Result) -> None:
        labels = (self._model(model), self._tenant(tenant), class_label(klass), result.value)
        self._requests.labels(*labels).inc()

    def predicted(self, model: str, figure: str, predicted: float, observed: float) -> None:
        if observed > 0:
            error = abs(predicted - observed) / observed
            self._error.labels(self._model(model), figure).observe(error)
