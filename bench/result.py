"""What one request came to: its timings, the tokens counted in its stream, its errors."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

# Error kinds (a request may have several; see bench/sse.py and bench/grpc_target.py).
CONNECT = "connect"
TIMEOUT = "timeout"
CLIENT_SATURATED = "client_saturated"
HTTP_FRAMING = "http_framing"
CONTENT_TYPE = "content_type"
SSE_FRAMING = "sse_framing"
BAD_JSON = "bad_json"
ERROR_EVENT = "error_event"
TRUNCATED = "truncated"
MISSING_DONE = "missing_done"
MISSING_USAGE = "missing_usage"
MISSING_FINISH = "missing_finish"
USAGE_SUM = "usage_sum"
TOKEN_COUNT = "token_count"
MAX_TOKENS = "max_tokens"


NO_RETRY_AFTER = "_without_retry_after"


def http_status(status: int) -> str:
    return f"http_{status}"


def grpc_status(code_name: str) -> str:
    return f"grpc_{code_name.lower()}"


def client_error(exc: BaseException) -> str:
    return f"client_{type(exc).__name__}"


class TokenClock:
    """Arrival times of a stream's tokens: time to first token and the gaps after it."""

    __slots__ = ("first", "itls", "last", "start", "tokens")

    def __init__(self, start: float) -> None:
        self.start = start
        self.first = math.nan
        self.last = start
        self.tokens = 0
        self.itls = array("d")

    def tick(self, now: float, n: int = 1) -> None:
        """`n` tokens arrived at `now` (n > 1: the extra ones arrived with no gap)."""
        if self.tokens == 0:
            self.first = now
        else:
            self.itls.append(now - self.last)
        if n > 1:
            self.itls.extend([0.0] * (n - 1))
        self.last = now
        self.tokens += n


@dataclass(slots=True)
class Result:
    index: int
    cls: int
    start: float  # perf_counter() when the request was sent
    end: float
    ttft_s: float  # NaN when no token arrived
    tokens: int  # tokens counted in the stream
    prompt_tokens: int
    itls_s: array[float] = field(default_factory=lambda: array("d"))
    errors: tuple[str, ...] = ()
    detail: str = ""  # "kind: what it said", for an error that said something

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def e2e_s(self) -> float:
        return self.end - self.start

    @classmethod
    def from_clock(
        cls,
        index: int,
        klass: int,
        clock: TokenClock,
        end: float,
        prompt: int,
        errors: list[str],
        detail: str = "",
    ) -> Result:
        first = clock.first - clock.start if clock.tokens else math.nan
        kinds = tuple(dict.fromkeys(errors))
        return cls(
            index, klass, clock.start, end, first, clock.tokens, prompt, clock.itls, kinds, detail
        )

    @classmethod
    def failed(
        cls, index: int, klass: int, start: float, end: float, kind: str, detail: str = ""
    ) -> Result:
        return cls(index, klass, start, end, math.nan, 0, 0, array("d"), (kind,), detail)
