"""vLLM's log lines in the sidecar's format, and its record factory kept to its own loggers.

vLLM logs as text on stdout, in the sidecar and in each of its engine's processes, unless it is
given a logging config file (`VLLM_LOGGING_CONFIG_PATH`, which its processes inherit).
`route_vllm_logs` writes one that sends the `vllm` loggers to stderr through the sidecar's own
formatter (JSON lines, or text), so that every line of a sidecar has one format and its stdout
carries none. An operator's own `VLLM_LOGGING_CONFIG_PATH` or `VLLM_CONFIGURE_LOGGING` wins.

vLLM also installs a log record factory that adds `vllm_process_name` to every record of the
process. Kept to vLLM's own loggers, the sidecar's records (and their JSON lines) stay as they
are.
"""

from __future__ import annotations

import atexit
import contextlib
import json as jsonlib
import logging
import os
import tempfile
from typing import Any

CONFIG_PATH = "VLLM_LOGGING_CONFIG_PATH"
CONFIGURE = "VLLM_CONFIGURE_LOGGING"


def logging_config(json: bool, level: str) -> dict[str, Any]:
    """A `logging.config.dictConfig` for the `vllm` loggers: stderr, the sidecar's formatter."""
    formatter = "gateway.logs.JsonFormatter" if json else "gateway.logs.TextFormatter"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"sidecar": {"()": formatter}},
        "handlers": {
            "sidecar": {
                "class": "logging.StreamHandler",
                "formatter": "sidecar",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {"vllm": {"handlers": ["sidecar"], "level": level.upper(), "propagate": False}},
    }


def route_vllm_logs(json: bool, level: str) -> str | None:
    """Point vLLM (this process's and its engine's children) at a config of `logging_config`,
    unless the environment already says how vLLM logs; the file's path, or None."""
    if CONFIG_PATH in os.environ or CONFIGURE in os.environ:
        return None
    fd, path = tempfile.mkstemp(prefix="shardgate-vllm-logging-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        jsonlib.dump(logging_config(json, level), f)
    atexit.register(_remove, path)
    os.environ[CONFIG_PATH] = path
    return path


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def confine_vllm_log_records() -> None:
    factory = logging.getLogRecordFactory()
    inner = getattr(factory, "_factory", None)
    if inner is None or type(factory).__name__ != "_VllmLogRecordFactory":
        return

    def make(name: str, *args: Any, **kwargs: Any) -> logging.LogRecord:
        chosen = factory if name == "vllm" or name.startswith("vllm.") else inner
        record: logging.LogRecord = chosen(name, *args, **kwargs)
        return record

    logging.setLogRecordFactory(make)
