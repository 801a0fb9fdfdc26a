"""vLLM installs a log record factory that adds `vllm_process_name` to every record of the
process. Kept to vLLM's own loggers, the sidecar's records (and their JSON lines) stay as they
are."""

from __future__ import annotations

import logging
from typing import Any


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
