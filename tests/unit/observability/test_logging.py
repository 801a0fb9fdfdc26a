from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from gateway.observability import logging as obslog
from gateway.observability.labels import Outcome


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(obslog.JsonFormatter())
    logger = logging.getLogger("shardgate.test.json")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, out
    logger.removeHandler(handler)


def lines(out: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_one_json_object_per_line_with_extra_fields(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = captured
    logger.info("link %s up", "sim-a", extra={"replica": "sim-a", "attempt": 3})
    logger.warning("multi\nline")
    first, second = lines(out)
    assert first["level"] == "info"
    assert first["logger"] == "shardgate.test.json"
    assert first["msg"] == "link sim-a up"
    assert first["replica"] == "sim-a" and first["attempt"] == 3
    ts = first["ts"]
    assert isinstance(ts, str) and ts.endswith("Z") and "T" in ts
    assert second["msg"] == "multi\nline" and second["level"] == "warning"


def test_exceptions_and_unserialisable_extras(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = captured
    try:
        raise ValueError("bad")
    except ValueError:
        logger.exception("failed", extra={"obj": object()})
    (line,) = lines(out)
    assert "ValueError: bad" in str(line["exc"])
    assert str(line["obj"]).startswith("<object object")


def test_request_log_writes_one_line_with_every_field(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = captured
    obslog.request_log(
        request_id="r-1",
        tenant="acme",
        model="llama",
        klass=2,
        replica="sim-a",
        prompt_tokens=12,
        completion_tokens=34,
        ttft_ms=12.34567,
        e2e_ms=890.1,
        outcome=Outcome.LENGTH,
        preemptions=1,
        migrations=2,
        retries=3,
        logger=logger,
    )
    (line,) = lines(out)
    assert line["msg"] == "request"
    assert {k: line[k] for k in line if k not in ("ts", "level", "logger", "msg")} == {
        "id": "r-1",
        "tenant": "acme",
        "model": "llama",
        "class": 2,
        "replica": "sim-a",
        "prompt_tokens": 12,
        "completion_tokens": 34,
        "ttft_ms": 12.346,
        "e2e_ms": 890.1,
        "outcome": "length",
        "preemptions": 1,
        "migrations": 2,
        "retries": 3,
    }


def test_request_log_is_silent_below_info(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = captured
    logger.setLevel(logging.WARNING)
    obslog.request_log(
        request_id="r",
        tenant="t",
        model="m",
        klass=0,
        replica="",
        prompt_tokens=0,
        completion_tokens=0,
        ttft_ms=None,
        e2e_ms=1.0,
        outcome="error",
        logger=logger,
    )
    assert out.getvalue() == ""


def test_setup_installs_one_handler_and_switches_format() -> None:
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    try:
        obslog.setup("debug", json=True)
        obslog.setup("INFO", json=False)
        added = [h for h in root.handlers if h not in before]
        assert len(added) == 1
        assert isinstance(added[0].formatter, obslog.TextFormatter)
        assert root.level == logging.INFO
    finally:
        for h in [h for h in root.handlers if h not in before]:
            root.removeHandler(h)
        root.setLevel(level)


def test_text_format_appends_extras() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", (), None)
    record.replica = "sim-a"
    assert obslog.TextFormatter().format(record).endswith("x: hello replica=sim-a")
