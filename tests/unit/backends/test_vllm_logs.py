from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest

from engine_sidecar.backends.vllm.logs import confine_vllm_log_records


class _VllmLogRecordFactory:
    """The shape of vLLM's factory: wraps the previous one, adds an attribute."""

    def __init__(self, factory: Callable[..., logging.LogRecord]) -> None:
        self._factory = factory

    def __call__(self, *args: object, **kwargs: object) -> logging.LogRecord:
        record = self._factory(*args, **kwargs)
        record.vllm_process_name = "MainProcess"
        return record


@pytest.fixture
def restore_factory() -> Iterator[None]:
    original = logging.getLogRecordFactory()
    yield
    logging.setLogRecordFactory(original)


def test_only_vllm_records_get_vllm_attributes(restore_factory: None) -> None:
    logging.setLogRecordFactory(_VllmLogRecordFactory(logging.getLogRecordFactory()))
    confine_vllm_log_records()
    make = logging.getLogRecordFactory()
    ours = make("shardgate.request", logging.INFO, __file__, 1, "m", (), None)
    theirs = make("vllm.engine", logging.INFO, __file__, 1, "m", (), None)
    assert not hasattr(ours, "vllm_process_name")
    assert theirs.vllm_process_name == "MainProcess"
