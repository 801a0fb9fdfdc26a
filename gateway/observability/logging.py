"""One line per finished request, in the processes' log format (gateway/logs.py: JSON lines
or text; its formatters and setup() are re-exported here).

{"ts":"2025-01-02T03:04:05.678Z","level":"info","logger":"shardgate.request","msg":"request",
 "id":"...","tenant":"acme","model":"sim-llama","class":0,...}
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

import orjson

from gateway import logs
from gateway.logs import JsonFormatter, TextFormatter, iso_ms, setup

__all__ = ["REQUEST_LOGGER", "JsonFormatter", "TextFormatter", "iso_ms", "request_log", "setup"]

REQUEST_LOGGER: Final = logging.getLogger("shardgate.request")


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
    h = logs.handler()
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
