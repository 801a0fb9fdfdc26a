"""The JSON report of a run (schema `shardgate.bench/v1`) and how it is built from results."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import msgspec

from bench.cpu import CpuSampler
from bench.gc_scrape import GcPauses
from bench.memory import StreamMemory
from bench.plan import Plan
from bench.result import Result
from bench.scenario import Scenario, TrafficClass
from bench.stats import Dist, dist_ms

SCHEMA = "shardgate.bench/v1"


class Latency(msgspec.Struct, frozen=True, kw_only=True):
    ttft_ms: Dist
    itl_ms: Dist
    e2e_ms: Dist


class Counts(msgspec.Struct, frozen=True, kw_only=True):
    planned: int
    sent: int
    ok: int
    failed: int
    output_tokens: int
    prompt_tokens: int


class Throughput(msgspec.Struct, frozen=True, kw_only=True):
    requests_per_s: float
    output_tokens_per_s: float


class Goodput(msgspec.Struct, frozen=True, kw_only=True):
    """The class's requests that finished within its targets."""

    met: int
    requests_per_s: float


class ClassReport(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    priority: int | None
    requests: Counts
    throughput: Throughput
    latency: Latency
    errors: dict[str, int]
    goodput: Goodput | None = None  # (a class with targets)


class ProcessCpu(msgspec.Struct, frozen=True, kw_only=True):
    pid: int
    cmdline: str
    children: bool
    cpu_s: float
    us_per_request: float
    us_per_token: float
    rss_initial_kib: int  # before the warmup
    rss_start_kib: int  # at the start of the measured window
    rss_end_kib: int


class ClientCpu(msgspec.Struct, frozen=True, kw_only=True):
    cpu_s: float
    us_per_request: float
    us_per_token: float


class Cpu(msgspec.Struct, frozen=True, kw_only=True):
    client: ClientCpu
    processes: list[ProcessCpu]


class Target(msgspec.Struct, frozen=True, kw_only=True):
    api: str
    address: str
    config: str | None = None  # the config the bench started the gateway from


class Report(msgspec.Struct, frozen=True, kw_only=True):
    schema: str = SCHEMA
    started_at: str
    duration_s: float
    target: Target
    scenario: Scenario
    warmup: Counts
    requests: Counts
    throughput: Throughput
    latency: Latency
    errors: dict[str, int]
    classes: list[ClassReport]
    cpu: Cpu
    # Up to SAMPLES distinct messages per error kind (an error event's text, an HTTP body, ...).
    error_samples: dict[str, list[str]] = {}
    # The gateway's RSS through the run (the first sampled process) and, over HTTP, its
    # collector pauses in the measured window (None: not measured).
    memory: StreamMemory | None = None
    gc: GcPauses | None = None


def counts(results: Sequence[Result], planned: int) -> Counts:
    ok = sum(1 for r in results if r.ok)
    return Counts(
        planned=planned,
        sent=len(results),
        ok=ok,
        failed=len(results) - ok,
        output_tokens=sum(r.tokens for r in results),
        prompt_tokens=sum(r.prompt_tokens for r in results),
    )


def latency(results: Sequence[Result]) -> Latency:
    ok = [r for r in results if r.ok]
    return Latency(
        ttft_ms=dist_ms(r.ttft_s for r in ok),
        itl_ms=dist_ms(x for r in ok for x in r.itls_s),
        e2e_ms=dist_ms(r.e2e_s for r in ok),
    )


def met(c: TrafficClass, r: Result) -> bool:
    """A request that finished within the class's targets (TPOT: its mean gap after the
    first token)."""
    if not r.ok:
        return False
    if c.slo_ttft_ms is not None and not r.ttft_s * 1000 <= c.slo_ttft_ms:
        return False
    tpot = c.slo_tpot_ms
    return tpot is None or not r.itls_s or sum(r.itls_s) / len(r.itls_s) * 1000 <= tpot


def goodput(c: TrafficClass, results: Sequence[Result], window_s: float) -> Goodput | None:
    if c.slo_ttft_ms is None and c.slo_tpot_ms is None:
        return None
    n = sum(1 for r in results if met(c, r))
    return Goodput(met=n, requests_per_s=n / max(window_s, 1e-9))


def errors_by_kind(results: Sequence[Result]) -> dict[str, int]:
    c: Counter[str] = Counter(k for r in results for k in r.errors)
    return dict(sorted(c.items()))


SAMPLES = 3


def error_samples(results: Sequence[Result]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in results:
        kind, _, text = r.detail.partition(": ")
        if text:
            seen = out.setdefault(kind, [])
            if len(seen) < SAMPLES and text not in seen:
                seen.append(text)
    return dict(sorted(out.items()))


def throughput(results: Sequence[Result], window_s: float) -> Throughput:
    w = max(window_s, 1e-9)
    ok = [r for r in results if r.ok]
    return Throughput(requests_per_s=len(ok) / w, output_tokens_per_s=sum(r.tokens for r in ok) / w)


def _per(cpu_s: float, n: int) -> float:
    return cpu_s * 1e6 / n if n else 0.0


def cpu_report(sampler: CpuSampler, results: Sequence[Result]) -> Cpu:
    n = len(results)
    tokens = sum(r.tokens for r in results)
    procs = [
        ProcessCpu(
            pid=s.pid,
            cmdline=s.cmdline,
            children=s.children,
            cpu_s=s.cpu_s,
            us_per_request=_per(s.cpu_s, n),
            us_per_token=_per(s.cpu_s, tokens),
            rss_initial_kib=s.rss_initial_kib,
            rss_start_kib=s.rss_start_kib,
            rss_end_kib=s.rss_end_kib,
        )
        for s in sampler.samples
    ]
    c = sampler.client_cpu_s
    client = ClientCpu(cpu_s=c, us_per_request=_per(c, n), us_per_token=_per(c, tokens))
    return Cpu(client=client, processes=procs)


def build(
    plan: Plan,
    target: Target,
    warmup: Sequence[Result],
    results: Sequence[Result],
    window_s: float,
    sampler: CpuSampler,
    started_at: dt.datetime,
) -> Report:
    scenario = plan.scenario
    classes = []
    for i, c in enumerate(scenario.classes):
        mine = [r for r in results if r.cls == i]
        planned = sum(1 for s in plan.measured if s.cls == i)
        classes.append(
            ClassReport(
                name=c.name,
                priority=c.priority,
                requests=counts(mine, planned),
                throughput=throughput(mine, window_s),
                latency=latency(mine),
                errors=errors_by_kind(mine),
                goodput=goodput(c, mine, window_s),
            )
        )
    return Report(
        started_at=started_at.isoformat(timespec="seconds"),
        duration_s=window_s,
        target=target,
        scenario=scenario,
        warmup=counts(warmup, len(plan.warmup)),
        requests=counts(results, len(plan.measured)),
        throughput=throughput(results, window_s),
        latency=latency(results),
        errors=errors_by_kind(results),
        classes=classes,
        cpu=cpu_report(sampler, results),
        error_samples=error_samples(results),
    )


def write(report: Report, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n")


def read(path: str | Path) -> Report:
    try:
        return msgspec.json.decode(Path(path).read_bytes(), type=Report)
    except (OSError, msgspec.DecodeError) as e:
        raise ValueError(f"{path}: not a bench report: {e}") from None
