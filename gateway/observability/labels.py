"""The closed sets of label values. Anything outside them is recorded as `other`."""

from __future__ import annotations

import enum

OTHER = "other"
ANONYMOUS = "anonymous"
# Priority classes are small integers; one outside +-MAX_CLASS is recorded as `other`.
MAX_CLASS = 99


class Outcome(enum.StrEnum):
    """How a request ended."""

    OK = "ok"  # the model stopped (eos or a stop string)
    LENGTH = "length"  # max_tokens or the context length reached
    ERROR = "error"  # the engine or the gateway failed it
    ABORTED = "aborted"  # cancelled on purpose (shutdown, drain)
    REJECTED = "rejected"  # refused before it ran (429, 503)
    TIMEOUT = "timeout"  # a deadline passed (first token, whole request)
    CLIENT_GONE = "client_gone"  # the client disconnected


class RejectReason(enum.StrEnum):
    """Why a request was refused; `status` is the HTTP status it got."""

    RATE_REQUESTS = "rate_requests"  # requests/s bucket empty
    RATE_TOKENS = "rate_tokens"  # tokens/min bucket empty
    BUDGET = "budget"  # a store key's or team's budget is spent
    QUEUE_FULL = "queue_full"  # the model's bounded queue is full
    QUEUE_TIMEOUT = "queue_timeout"  # waited in the queue past its deadline
    OBJECTIVE = "objective"  # sheddable, and could no longer make its TTFT target
    NO_REPLICA = "no_replica"  # no healthy replica serves the model
    LINK_SATURATED = "link_saturated"  # the chosen link's outgoing queue is full
    SHUTTING_DOWN = "shutting_down"  # the gateway is draining

    @property
    def status(self) -> int:
        limits = (RejectReason.RATE_REQUESTS, RejectReason.RATE_TOKENS, RejectReason.BUDGET)
        return 429 if self in limits else 503


class ReplicaState(enum.IntEnum):
    """The value of `shardgate_replica_state`."""

    DOWN = 0
    SUSPECT = 1
    UP = 2
    EJECTED = 3


class ProtocolError(enum.StrEnum):
    """Why the HTTP edge refused or cut a connection before a handler could answer."""

    BAD_REQUEST_LINE = "bad_request_line"  # not an HTTP request line (method, target, version)
    BAD_HEADER = "bad_header"  # a malformed header or framing (Content-Length, chunked)
    HEADERS_TOO_LARGE = "headers_too_large"  # a line or field over its limit, too many fields
    BAD_BODY = "bad_body"  # the body's framing broke while it was being read
    HEADER_TIMEOUT = "header_timeout"  # the request head did not arrive in time
    BODY_TIMEOUT = "body_timeout"  # the body stopped arriving


_OUTCOMES = frozenset(Outcome)
_REASONS = {r.value: r for r in RejectReason}


def outcome_label(outcome: str) -> str:
    return outcome if outcome in _OUTCOMES else OTHER


def reason_of(reason: str) -> RejectReason | None:
    return _REASONS.get(reason)


def class_label(klass: int) -> str:
    return str(klass) if -MAX_CLASS <= klass <= MAX_CLASS else OTHER
