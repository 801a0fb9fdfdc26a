"""The drill's report: rows, totals, verdict, table and JSON."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgspec
import pytest

from drill import report
from drill.classify import Tally
from drill.requests import RequestRecord
from drill.scrape import Counters
from drill.timeline import Timings


def row(kind: str = "kill", **kw: object) -> report.FaultReport:
    base = report.fault_report(
        kind=kind,
        description="SIGKILL a standalone sidecar, then start it again",
        target="sim-a",
        address="127.0.0.1:50081",
        hold_s=2.5,
        tally=Tally(sent=30, completed=30, reasons=Counter()),
        counters=Counters(4.0, 1.0, 0.0, {"length": 30.0, "error": 0.0}),
        timings=Timings(0.0512, 0.0512, 1.8123, True),
        serving_s=1.9,
        samples=120,
        records=[RequestRecord(index=i, started=0.0, ended=float(i + 1)) for i in range(10)],
    )
    return msgspec.structs.replace(base, **kw)


def drill_report(rows: list[report.FaultReport]) -> report.DrillReport:
    return report.DrillReport(
        started_at="2026-01-01T00:00:00+00:00",
        config="configs/drill.yaml",
        mode="local",
        gateway="http://127.0.0.1:8095",
        model="sim-llama",
        concurrency=16,
        distinct_requests=32,
        tokens=(200, 300),
        reference=report.Totals(sent=32, completed=32),
        faults=rows,
        skipped=["rank-kill: no non-zero rank of a shard group"],
        totals=report.totals(rows),
        ok=report.passed(rows),
    )


def test_a_row_takes_counter_deltas_and_rounded_times() -> None:
    r = row()
    assert (r.sent, r.completed, r.lost, r.corrupted) == (30, 30, 0, 0)
    assert (r.migrated, r.retried, r.ejections) == (4, 1, 0)
    assert r.outcomes == {"length": 30}  # zero deltas are left out
    assert (r.detect_s, r.takeout_s, r.recover_s) == (0.051, 0.051, 1.812)
    assert r.duration_s == {"p50": 5.0, "p90": 9.0, "max": 10.0}


def test_totals_and_verdict() -> None:
    rows = [row(), row("stop", lost=1, completed=29), row("slow", corrupted=2, completed=28)]
    t = report.totals(rows)
    assert (t.sent, t.completed, t.lost, t.corrupted, t.migrated) == (90, 87, 1, 2, 12)
    assert not report.passed(rows)
    assert not report.passed([row(recovered=False)])
    assert report.passed([row(), row("stop")])
    assert report.passed([])


def test_serving_after_takes_the_first_request_sent_after_the_clear() -> None:
    recs = [
        RequestRecord(index=0, started=9.0, replica="a"),
        RequestRecord(index=1, started=10.4, replica="b"),
        RequestRecord(index=2, started=10.9, replica="a"),
        RequestRecord(index=3, started=10.6, replica="a"),
    ]
    assert report.serving_after(recs, "a", 10.0) == pytest.approx(0.6)
    assert report.serving_after(recs, "c", 10.0) is None


def test_the_table_has_a_row_per_fault_and_a_total() -> None:
    text = report.table(drill_report([row(), row("heartbeat", detect_s=None, recover_s=None)]))
    lines = text.splitlines()
    assert lines[0].split() == [
        "fault",
        "target",
        "sent",
        "done",
        "lost",
        "corrupt",
        "migrated",
        "retried",
        "detect",
        "out",
        "recover",
        "serving",
    ]
    assert lines[2].split() == [
        "kill",
        "sim-a",
        "30",
        "30",
        "0",
        "0",
        "4",
        "1",
        "0.05s",
        "0.05s",
        "1.81s",
        "1.90s",
    ]
    assert lines[3].split()[8] == "-"
    assert lines[-1].split() == ["total", "60", "60", "0", "0", "8", "2"]


def test_an_unrecovered_fault_shows_no_and_fails() -> None:
    r = drill_report([row(recovered=False)])
    assert report.table(r).splitlines()[2].split()[10] == "NO"
    text = report.summary(r)
    assert "did not recover" in text
    assert text.splitlines()[-1].startswith("FAIL")


def test_the_summary_names_what_was_skipped_and_the_examples() -> None:
    r = drill_report([row(lost=1, examples=["request 3 on 127.0.0.1:50081: 2 tokens of 5"])])
    text = report.summary(r)
    assert "skipped rank-kill" in text
    assert "kill: request 3 on 127.0.0.1:50081: 2 tokens of 5" in text


def test_the_json_report_round_trips(tmp_path: Path) -> None:
    r = drill_report([row()])
    path = report.write(r, tmp_path / "out")
    assert path.name == "report.json"
    assert (tmp_path / "out" / "table.txt").read_text().startswith("drill of")
    data = msgspec.json.decode(path.read_bytes())
    assert set(data) == {
        "started_at",
        "config",
        "mode",
        "gateway",
        "model",
        "concurrency",
        "distinct_requests",
        "tokens",
        "reference",
        "faults",
        "skipped",
        "totals",
        "ok",
    }
    assert data["faults"][0]["kind"] == "kill"
    assert msgspec.json.decode(path.read_bytes(), type=report.DrillReport) == r


def test_a_long_gap_between_scrapes_is_pointed_out() -> None:
    assert "no scrape" not in report.summary(drill_report([row(sample_gap_s=0.2)]))
    text = report.summary(drill_report([row(sample_gap_s=1.08)]))
    assert "kill: no scrape of the gateway for 1.08s" in text


def test_durations_of_nothing_is_empty() -> None:
    assert report.durations([]) == {}
