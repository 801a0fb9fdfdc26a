"""PNG plots of a run: latency CDFs and TTFT over time (matplotlib, Agg, no pyplot state)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.result import Result

MAX_POINTS = 2000


def _cdf(values_ms: list[float]) -> tuple[list[float], list[float]]:
    """The empirical CDF, thinned to at most MAX_POINTS points (always keeping the max)."""
    v = sorted(values_ms)
    n = len(v)
    step = max(1, n // MAX_POINTS)
    idx = list(range(0, n, step))
    if idx[-1] != n - 1:
        idx.append(n - 1)
    return [v[i] for i in idx], [(i + 1) / n for i in idx]


def _groups(results: Sequence[Result], names: Sequence[str]) -> list[tuple[str, list[Result]]]:
    ok = [r for r in results if r.ok]
    if len(names) <= 1:
        return [("all", ok)]
    return [(name, [r for r in ok if r.cls == i]) for i, name in enumerate(names)]


def write_plots(results: Sequence[Result], class_names: Sequence[str], out_dir: Path) -> list[Path]:
    """Writes latency_cdf.png and ttft_over_time.png; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    out_dir.mkdir(parents=True, exist_ok=True)
    groups = _groups(results, class_names)
    fig = Figure(figsize=(15, 4.5), layout="constrained")
    axes = fig.subplots(1, 3)
    metrics: tuple[tuple[str, Callable[[list[Result]], list[float]]], ...] = (
        ("TTFT", lambda rs: [r.ttft_s * 1e3 for r in rs]),
        ("inter-token latency", lambda rs: [x * 1e3 for r in rs for x in r.itls_s]),
        ("end-to-end latency", lambda rs: [r.e2e_s * 1e3 for r in rs]),
    )
    for ax, (title, get) in zip(axes, metrics, strict=True):
        for name, rs in groups:
            values = [x for x in get(rs) if not math.isnan(x)]
            if values:
                xs, ys = _cdf(values)
                ax.plot(xs, ys, label=name)
        ax.set_title(f"{title} CDF")
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of samples")
        ax.grid(True, alpha=0.3)
        if len(groups) > 1:
            ax.legend()
    cdf_path = out_dir / "latency_cdf.png"
    fig.savefig(cdf_path, dpi=100)

    fig = Figure(figsize=(10, 4.5), layout="constrained")
    ax = fig.subplots()
    t0 = min((r.start for r in results), default=0.0)
    for name, rs in groups:
        pts = [(r.start - t0, r.ttft_s * 1e3) for r in rs if not math.isnan(r.ttft_s)]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=4, label=name)
    ax.set_title("TTFT over time (by send time)")
    ax.set_xlabel("s since the start of the measured window")
    ax.set_ylabel("TTFT, ms")
    ax.grid(True, alpha=0.3)
    if len(groups) > 1:
        ax.legend()
    time_path = out_dir / "ttft_over_time.png"
    fig.savefig(time_path, dpi=100)
    return [cdf_path, time_path]
