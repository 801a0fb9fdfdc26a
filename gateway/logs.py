"""Log lines of every shardgate process (the gateway, its workers, the engine sidecars): one
JSON object per line, or text for a terminal, on stderr.

{"ts":"2025-01-02T03:04:05.678Z","level":"info","logger":"engine_sidecar.server","msg":"..."}

A leaf module (the standard library and orjson), imported by the sidecar as it imports
gateway.tasks and gateway.procs; the gateway's request lines are in gateway/observability.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import Any, Final, Literal

import orjson

__all__ = [
    "FORMATS",
    "JsonFormatter",
    "LogFormat",
    "TextFormatter",
    "extras",
    "handler",
    "iso_ms",
    "setup",
]

LogFormat = Literal["json", "text"]
FORMATS: Final[tuple[LogFormat, ...]] = ("json", "text")  # (`--log-format`'s choices)

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD: Final = frozenset(
    [*logging.LogRecord("", 0, "", 0, "", (), None).__dict__, "message", "asctime", "taskName"]
)


def extras(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a record was given with `extra=`."""
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
        for k, v in extras(record).items():
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
        more = extras(record)
        if not more:
            return line
        return line + " " + " ".join(f"{k}={v}" for k, v in more.items())


_handler: logging.Handler | None = None


def handler() -> logging.Handler | None:
    """The handler setup() installed on the root logger (None before it ran)."""
    return _handler


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
