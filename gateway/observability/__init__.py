"""Prometheus metrics with closed label sets, and structured JSON logs."""

from gateway.observability.labels import Outcome, ProtocolError, RejectReason, ReplicaState
from gateway.observability.metrics import GatewayMetrics

__all__ = [
    "GatewayMetrics",
    "Outcome",
    "ProtocolError",
    "RejectReason",
    "ReplicaState",
]
