from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from gateway import logs
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


@pytest.fixture
def root_json() -> Iterator[io.StringIO]:
    """setup()'s handler on the root logger, writing to a buffer."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    for h in before:
        root.removeHandler(h)
    obslog.setup("INFO", json=True)
    installed = logs.handler()
    assert isinstance(installed, logging.StreamHandler)
    out = io.StringIO()
    installed.setStream(out)
    try:
        yield out
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in before:
            root.addHandler(h)
        root.setLevel(level)


def _one_request(**over: object) -> None:
    fields: dict[str, object] = {
        "request_id": "r-9",
        "tenant": "acme",
        "model": "llama",
        "klass": 1,
        "replica": "sim-b",
        "prompt_tokens": 5,
        "completion_tokens": 7,
        "ttft_ms": 1.23456,
        "e2e_ms": 9.87654,
        "outcome": Outcome.OK,
        **over,
    }
    obslog.request_log(**fields)  # type: ignore[arg-type]


def test_request_line_skips_the_log_record_when_only_the_json_handler_hears_it(
    root_json: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The usual set-up (setup()'s handler alone): the line is written without a LogRecord,
    # and it is the line the formatter writes, key for key and in the same order.
    def no_record(*a: object, **k: object) -> logging.LogRecord:
        raise AssertionError("a LogRecord was made")

    root = logging.getLogger()
    others = [h for h in root.handlers if h is not logs.handler()]  # (pytest's own)
    with monkeypatch.context() as m:
        m.setattr(root, "handlers", [logs.handler()])
        m.setattr(logging.Logger, "makeRecord", no_record)
        _one_request()
    assert others == [h for h in root.handlers if h is not logs.handler()]
    direct = root_json.getvalue()
    root_json.seek(0)
    root_json.truncate()
    installed = logs.handler()
    assert installed is not None
    installed.addFilter(lambda r: True)  # (a filter: logging's own path)
    _one_request()
    through_logging = root_json.getvalue()
    a, b = orjson.loads(direct), orjson.loads(through_logging)
    assert direct.endswith("\n") and direct.count("\n") == 1
    assert list(a) == list(b)
    assert {k: v for k, v in a.items() if k != "ts"} == {k: v for k, v in b.items() if k != "ts"}
    assert a["logger"] == "shardgate.request" and a["msg"] == "request" and a["ttft_ms"] == 1.235


def test_request_line_goes_through_logging_when_another_handler_hears_it(
    root_json: io.StringIO, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="shardgate.request"):
        _one_request()
    (record,) = [r for r in caplog.records if r.name == "shardgate.request"]
    assert record.getMessage() == "request" and record.__dict__["tenant"] == "acme"
    assert orjson.loads(root_json.getvalue())["id"] == "r-9"  # and the JSON handler's line


def test_timestamps_round_as_datetime_does() -> None:
    import datetime
    import random

    rng = random.Random(7)
    for _ in range(20_000):
        t = rng.uniform(0, 4e9)
        if rng.random() < 0.5:
            t = round(t, 3) + rng.choice([0.0005, -0.0005, 5e-7, 0.9999995])
        want = datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="milliseconds")
        assert obslog.iso_ms(t) == want.replace("+00:00", "Z"), t


def test_request_line_that_cannot_be_written_is_said_as_logging_says_it(
    root_json: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = logs.handler()
    assert installed is not None
    errors: list[logging.LogRecord] = []
    monkeypatch.setattr(installed, "handleError", errors.append)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [installed])
    _one_request(prompt_tokens=2**70)  # (no JSON for it: logging's own path, which reports it)
    assert len(errors) == 1 and root_json.getvalue() == ""

    def failing_flush() -> None:
        raise OSError("disk full")

    monkeypatch.setattr(installed, "flush", failing_flush)
    _one_request()
    assert len(errors) == 2  # reported once, and the line was not written twice
    assert root_json.getvalue().count("\n") == 1
