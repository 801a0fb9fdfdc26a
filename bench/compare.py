"""Reports as text: the summary of one run, and two runs side by side (`bench compare`)."""

from __future__ import annotations

import math

from bench.report import Latency, Report

# (label, value, unit, which way is better: +1 higher, -1 lower, 0 neither)
Row = tuple[str, float, str, int]


def _latency_rows(prefix: str, lat: Latency) -> list[Row]:
    return [
        (f"{prefix}{name} {q}", getattr(d, q), "ms", -1)
        for name, d in (("TTFT", lat.ttft_ms), ("ITL", lat.itl_ms), ("E2E", lat.e2e_ms))
        for q in ("p50", "p90", "p99")
    ]


def _short(cmdline: str) -> str:
    words = cmdline.split()
    tail = " ".join(w.rsplit("/", 1)[-1] for w in words[:3])
    return tail[:40]


def metrics(r: Report) -> list[Row]:
    rows: list[Row] = [
        ("requests sent", r.requests.sent, "", 0),
        ("requests failed", r.requests.failed, "", -1),
        ("requests/s", r.throughput.requests_per_s, "1/s", 1),
        ("output tokens/s", r.throughput.output_tokens_per_s, "1/s", 1),
    ]
    rows += _latency_rows("", r.latency)
    rows += [(f"errors: {k}", v, "", -1) for k, v in r.errors.items()]
    for c in r.classes:
        p = f"[{c.name}] "
        rows.append((f"{p}requests/s", c.throughput.requests_per_s, "1/s", 1))
        rows.append((f"{p}requests failed", c.requests.failed, "", -1))
        rows += [row for row in _latency_rows(p, c.latency) if row[0].endswith(("p50", "p99"))]
    for i, proc in enumerate(r.cpu.processes):
        p = f"cpu #{i} ({_short(proc.cmdline)}{' +children' if proc.children else ''}) "
        rows.append((f"{p}µs/request", proc.us_per_request, "µs", -1))
        rows.append((f"{p}µs/token", proc.us_per_token, "µs", -1))
        rows.append((f"{p}RSS before warmup", proc.rss_initial_kib / 1024, "MiB", -1))
        rows.append((f"{p}RSS start", proc.rss_start_kib / 1024, "MiB", -1))
        rows.append((f"{p}RSS end", proc.rss_end_kib / 1024, "MiB", -1))
    if r.memory is not None:
        m = r.memory
        rows.append((f"gateway RSS peak ({m.streams} streams)", m.rss_peak_kib / 1024, "MiB", -1))
        rows.append(("gateway RSS after", m.rss_after_kib / 1024, "MiB", -1))
        rows.append(("gateway RSS per stream", m.bytes_per_stream / 1024, "KiB", -1))
    if r.gc is not None:
        rows.append(("gc pauses", r.gc.count, "", -1))
        rows.append(("gc pause total", r.gc.total_ms, "ms", -1))
        rows.append(("gc cpu total", r.gc.cpu_ms, "ms", -1))
        for g in r.gc.generations:
            rows.append((f"gc gen{g.generation} pauses", g.count, "", -1))
            rows.append((f"gc gen{g.generation} p99 (at most)", g.p99_ms_at_most, "ms", -1))
            rows.append((f"gc gen{g.generation} max since start", g.max_ms_since_start, "ms", -1))
    rows.append(("client cpu µs/token", r.cpu.client.us_per_token, "µs", -1))
    rows.append(("client cpu µs/request", r.cpu.client.us_per_request, "µs", -1))
    return rows


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"


def summary(r: Report) -> str:
    s = r.scenario
    head = (
        f"{s.name}: {s.api} {s.endpoint} {s.mode} loop, "
        + (f"concurrency {s.concurrency}" if s.mode == "closed" else f"{s.rate_rps} req/s")
        + f", {r.requests.sent} requests in {r.duration_s:.2f} s against {r.target.address}"
    )
    width = max(len(row[0]) for row in metrics(r))
    lines = [head]
    for label, value, unit, _ in metrics(r):
        lines.append(f"  {label:<{width}}  {_fmt(value):>12} {unit}")
    for kind, samples in r.error_samples.items():
        lines += [f"  e.g. {kind}: {text}" for text in samples]
    return "\n".join(lines)


def _change(a: float, b: float, better: int) -> str:
    if math.isnan(a) or math.isnan(b):
        return ""
    if a == b:
        return "="
    if a == 0:
        return "new" if b else "="
    pct = (b - a) / abs(a) * 100
    mark = ""
    if better and abs(pct) >= 1:
        mark = "  better" if (pct > 0) == (better > 0) else "  worse"
    return f"{pct:+.1f}%{mark}"


def side_by_side(a: Report, b: Report, name_a: str = "A", name_b: str = "B") -> str:
    rows_a = {row[0]: row for row in metrics(a)}
    rows_b = {row[0]: row for row in metrics(b)}
    labels = list(rows_a) + [k for k in rows_b if k not in rows_a]
    width = max(len(k) for k in labels)
    lines = [
        f"A: {name_a} ({a.scenario.name}, {a.started_at})",
        f"B: {name_b} ({b.scenario.name}, {b.started_at})",
        f"  {'metric':<{width}}  {'A':>12}  {'B':>12}  change",
    ]
    for label in labels:
        ra, rb = rows_a.get(label), rows_b.get(label)
        va = ra[1] if ra else math.nan
        vb = rb[1] if rb else math.nan
        unit = (ra or rb or ("", 0, "", 0))[2]
        better = (ra or rb or ("", 0, "", 0))[3]
        lines.append(
            f"  {label:<{width}}  {_fmt(va):>12}  {_fmt(vb):>12}  {_change(va, vb, better)}"
            + (f"  ({unit})" if unit else "")
        )
    return "\n".join(lines)
