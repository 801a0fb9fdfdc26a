"""Structured logs: one JSON object per line, and one line per finished request.

{"ts":"2025-01-02T03:04:05.678Z","level":"info","logger":"shardgate.request","msg":"request",
 "id":"...","tenant":"acme","model":"sim-llama","class":0,...}
"""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import Any, Final

import orjson

REQUEST_LOGGER: Final = logging.getLogger("shardgate.request")

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD: Final = frozenset(
    [*logging.LogRecord("", 0, "", 0, "", (), None).__dict__, "message", "asctime", "taskName"]
)


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


_second: tuple[int, str] = (-1, "")  # the last second formatted, and its text (one object:
# a logging thread reads a consistent pair)


def iso_ms(created: float) -> str:
    """`created` (seconds since the epoch) as UTC ISO 8601 to the millisecond, with a Z."""
    frac, whole = math.modf(created)  # (rounded as datetime.fromtimestamp rounds)
    us = round(frac * 1e6)
    sec = int(whole)
    if us >= 1_000_000:
        sec, us = sec + 1, us - 1_000_000
    elif us < 0:
        sec, us = sec - 1, us + 1_000_000
    global _second
    known = _second
    if known[0] != sec:
        known = _second = (sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)))
    return f"{known[1]}.{us // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """ts (UTC, ms), level, logger, msg, the `extra` fields, and exc when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": iso_ms(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in _extras(record).items():
            out.setdefault(k, v)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """For a terminal: the usual line, then the `extra` fields as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = _extras(record)
        if not extras:
            return line
        return line + " " + " ".join(f"{k}={v}" for k, v in extras.items())


_handler: logging.Handler | None = None


def setup(level: int | str = "INFO", json: bool = True) -> None:
    """Send the root logger to stderr as JSON lines (or text); safe to call again."""
    global _handler
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(JsonFormatter() if json else TextFormatter())
    root.addHandler(_handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)


def request_log(
    *,
    request_id: str,
    tenant: str,
    model: str,
    klass: int,
    replica: str,
    prompt_tokens: int,
    completion_tokens: int,
    ttft_ms: float | None,
    e2e_ms: float,
    outcome: str,
    preemptions: int = 0,
    migrations: int = 0,
    retries: int = 0,
    logger: logging.Logger = REQUEST_LOGGER,
) -> None:
    """The one line a request leaves when it ends (info level, message `request`)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    fields = {
        "id": request_id,
        "tenant": tenant,
        "model": model,
        "class": klass,
        "replica": replica,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "ttft_ms": None if ttft_ms is None else round(ttft_ms, 3),
        "e2e_ms": round(e2e_ms, 3),
        "outcome": str(outcome),
        "preemptions": preemptions,
        "migrations": migrations,
        "retries": retries,
    }
    handler = _only_json_handler(logger)
    if handler is None:
        logger.info("request", extra=fields)
        return
    # The line the formatter would make, without a LogRecord (a request's cost).
    head = {"ts": iso_ms(time.time()), "level": "info", "logger": logger.name}
    try:
        line = orjson.dumps({**head, "msg": "request", **fields}, default=str).decode()
    except Exception:
        logger.info("request", extra=fields)  # (its formatter fails the same way, and says so)
        return
    handler.acquire()
    try:
        handler.stream.write(line + handler.terminator)
        handler.flush()
    except Exception:  # as StreamHandler.emit does
        record = logging.LogRecord(logger.name, logging.INFO, "", 0, "request", (), None)
        handler.handleError(record)
    finally:
        handler.release()


def _only_json_handler(logger: logging.Logger) -> logging.StreamHandler[Any] | None:
    """setup()'s handler, when a record of `logger` at info would reach it alone, through no
    filter and with JSON lines: the request line may then be written directly."""
    h = _handler
    if (
        not isinstance(h, logging.StreamHandler)
        or not isinstance(h.formatter, JsonFormatter)
        or h.filters
        or logger.filters
        or logger.disabled
        or h.level > logging.INFO
    ):
        return None
    found = False
    c: logging.Logger | None = logger
    while c is not None:
        for x in c.handlers:
            if x is not h:
                return None
            found = True
        if not c.propagate:
            break
        c = c.parent
    return h if found else None
