"""The drill's report: one row per fault, a table for people and JSON for tools (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import msgspec

from drill.classify import Tally
from drill.requests import RequestRecord
from drill.scrape import Counters
from drill.timeline import Timings


class FaultReport(msgspec.Struct, kw_only=True):
    kind: str
    description: str
    target: str  # the sidecar's config name
    address: str
    hold_s: float  # how long the fault was on (injection to clearing), as measured
    sent: int
    completed: int
    lost: int
    corrupted: int
    # Deltas of the gateway's counters over the fault's window.
    migrated: int
    retried: int
    ejections: int
    outcomes: dict[str, int]  # shardgate_requests_total by outcome
    # Seconds from injection (detect, takeout) or from clearing the fault (recover, serving);
    # None: it did not happen within the window.
    detect_s: float | None
    takeout_s: float | None
    recover_s: float | None
    serving_s: float | None  # to the first new request that the target's replica took
    recovered: bool
    # Seconds from sending to the end of the stream, over the window's requests.
    duration_s: dict[str, float]  # p50, p90, max
    reasons: dict[str, int]  # what went wrong, alike failures counted together
    examples: list[str]
    samples: int  # scrapes of the gateway in the window
    # The longest time without a scrape from the injection to the window's end: the times above
    # may be late by this much.
    sample_gap_s: float = 0.0
    # What the scrapes showed, at each change: [seconds from the injection, [the target's
    # shardgate_replica_state], routable replicas]. The fault was cleared at hold_s.
    timeline: list[tuple[float, list[int], int | None]] = []


class Totals(msgspec.Struct, kw_only=True):
    sent: int = 0
    completed: int = 0
    lost: int = 0
    corrupted: int = 0
    migrated: int = 0
    retried: int = 0


class DrillReport(msgspec.Struct, kw_only=True):
    started_at: str  # ISO 8601, UTC
    config: str
    mode: str  # "local" or "attach"
    gateway: str  # its base URL
    model: str
    concurrency: int
    distinct_requests: int
    tokens: tuple[int, int]  # max_tokens range of the requests
    reference: Totals  # the undisturbed run: every distinct request once
    faults: list[FaultReport]
    skipped: list[str]
    totals: Totals
    ok: bool  # nothing lost or corrupted, every faulted replica recovered


# A longer time without a scrape makes a window's times uncertain (the summary says so).
GAP_WARNING_S = 0.5


def serving_after(records: Iterable[RequestRecord], address: str, since: float) -> float | None:
    """Seconds from `since` to the first request sent after it that `address` took."""
    starts = [r.started for r in records if r.started >= since and r.replica == address]
    return min(starts) - since if starts else None


def durations(records: Iterable[RequestRecord]) -> dict[str, float]:
    """p50, p90 and max of the requests' durations (nearest rank); empty without requests."""
    d = sorted(r.ended - r.started for r in records)
    if not d:
        return {}

    def rank(q: float) -> float:
        return round(d[min(len(d) - 1, max(0, math.ceil(q * len(d)) - 1))], 3)

    return {"p50": rank(0.5), "p90": rank(0.9), "max": round(d[-1], 3)}


def fault_report(
    *,
    kind: str,
    description: str,
    target: str,
    address: str,
    hold_s: float,
    tally: Tally,
    counters: Counters,
    timings: Timings,
    serving_s: float | None,
    samples: int,
    records: Sequence[RequestRecord] = (),
    timeline: Sequence[tuple[float, list[int], int | None]] = (),
    sample_gap_s: float = 0.0,
) -> FaultReport:
    return FaultReport(
        kind=kind,
        description=description,
        target=target,
        address=address,
        hold_s=hold_s,
        sent=tally.sent,
        completed=tally.completed,
        lost=tally.lost,
        corrupted=tally.corrupted,
        migrated=round(counters.migrations),
        retried=round(counters.retries),
        ejections=round(counters.ejections),
        outcomes=outcome_counts(counters.outcomes),
        detect_s=_r(timings.detect_s),
        takeout_s=_r(timings.takeout_s),
        recover_s=_r(timings.recover_s),
        serving_s=_r(serving_s),
        recovered=timings.recovered,
        duration_s=durations(records),
        reasons=dict(tally.reasons),
        examples=list(tally.examples),
        samples=samples,
        timeline=list(timeline),
        sample_gap_s=round(sample_gap_s, 3),
    )


def totals(faults: Sequence[FaultReport]) -> Totals:
    return Totals(
        sent=sum(f.sent for f in faults),
        completed=sum(f.completed for f in faults),
        lost=sum(f.lost for f in faults),
        corrupted=sum(f.corrupted for f in faults),
        migrated=sum(f.migrated for f in faults),
        retried=sum(f.retried for f in faults),
    )


def passed(faults: Sequence[FaultReport]) -> bool:
    return all(f.lost == 0 and f.corrupted == 0 and f.recovered for f in faults)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


_COLUMNS = (
    ("fault", "<"),
    ("target", "<"),
    ("sent", ">"),
    ("done", ">"),
    ("lost", ">"),
    ("corrupt", ">"),
    ("migrated", ">"),
    ("retried", ">"),
    ("detect", ">"),
    ("out", ">"),
    ("recover", ">"),
    ("serving", ">"),
)


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}s"


def _row(f: FaultReport) -> list[str]:
    recover = _secs(f.recover_s) if f.recovered else "NO"
    return [
        f.kind,
        f.target,
        str(f.sent),
        str(f.completed),
        str(f.lost),
        str(f.corrupted),
        str(f.migrated),
        str(f.retried),
        _secs(f.detect_s),
        _secs(f.takeout_s),
        recover,
        _secs(f.serving_s),
    ]


def table(report: DrillReport) -> str:
    rows = [[name for name, _ in _COLUMNS], *(_row(f) for f in report.faults)]
    t = report.totals
    figures = (t.sent, t.completed, t.lost, t.corrupted, t.migrated, t.retried)
    rows.append(["total", "", *(str(x) for x in figures), "", "", "", ""])
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    lines = []
    for i, r in enumerate(rows):
        cells = [f"{c:{a}{w}}" for c, (_, a), w in zip(r, _COLUMNS, widths, strict=True)]
        lines.append("  ".join(cells).rstrip())
        if i == 0 or i == len(rows) - 2:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary(report: DrillReport) -> str:
    lo, hi = report.tokens
    head = (
        f"drill of {report.gateway} ({report.mode}, {report.config}): {report.concurrency} "
        f"streams, {report.distinct_requests} distinct requests of {lo}-{hi} tokens; reference "
        f"run {report.reference.completed}/{report.reference.sent} complete"
    )
    notes = [head, "", table(report), ""]
    notes.append(
        "detect/out: injection -> the gateway shows the sidecar not UP / out of routing; "
        "recover: fault cleared -> UP and routable again; serving: cleared -> first new "
        "request it took"
    )
    notes += [f"skipped {s}" for s in report.skipped]
    for f in report.faults:
        if f.sample_gap_s > GAP_WARNING_S:
            notes.append(
                f"{f.kind}: no scrape of the gateway for {f.sample_gap_s:.2f}s in the window "
                "(a stalled machine?): its times may be late by as much"
            )
        for ex in f.examples:
            notes.append(f"{f.kind}: {ex}")
        if not f.recovered:
            notes.append(f"{f.kind}: {f.target} did not recover within the window")
    verdict = "PASS" if report.ok else "FAIL"
    t = report.totals
    notes.append(
        f"{verdict}: {t.lost} lost, {t.corrupted} corrupted of {t.sent} requests; "
        f"{t.migrated} migrated, {t.retried} retried"
    )
    return "\n".join(notes)


def write(report: DrillReport, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "report.json"
    path.write_bytes(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
    (out_dir / "table.txt").write_text(summary(report) + "\n")
    return path


def outcome_counts(outcomes: Mapping[str, float]) -> dict[str, int]:
    return {k: round(v) for k, v in outcomes.items() if round(v)}
