"""One bench run end to end: target, warmup, measured window with CPU sampling, report."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import time
from pathlib import Path
from typing import Protocol

import msgspec
import uvloop

from bench import compare, cpu, gc_scrape, report
from bench.launch import LaunchedGateway
from bench.memory import RssSampler
from bench.plan import Plan
from bench.progress import Progress
from bench.result import Result
from bench.runner import Tally, Target, run_phase
from bench.scenario import Scenario

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_GRPC = "127.0.0.1:50051"


class ClosableTarget(Protocol):
    address: str

    async def __call__(self, spec: object) -> Result: ...

    async def close(self) -> None: ...


def make_target(sc: Scenario, address: str) -> ClosableTarget:
    if sc.api == "http":
        from bench.openai_target import OpenAITarget

        return OpenAITarget(address, sc)  # type: ignore[return-value]
    if sc.api == "link":
        from bench.link_target import LinkTarget

        return LinkTarget(address, sc)  # type: ignore[return-value]
    from bench.grpc_target import EngineTarget, GatewayTarget

    cls = GatewayTarget if sc.api == "grpc" else EngineTarget
    return cls(address, sc)  # type: ignore[return-value]


def address_for(sc: Scenario, args: argparse.Namespace, gw: LaunchedGateway | None) -> str:
    if sc.api == "http":
        return args.url or (gw.http_url if gw else DEFAULT_URL)
    if sc.api == "grpc":
        return args.grpc or (gw.grpc_target if gw else DEFAULT_GRPC)
    if args.engine:
        return str(args.engine)
    if gw is not None and gw.sidecars:
        return gw.sidecars[0]
    raise ValueError(f"--api {sc.api} needs --engine HOST:PORT (or --config)")


def cpu_pids(args: argparse.Namespace, gw: LaunchedGateway | None) -> list[int]:
    pids = list(args.cpu_pid)
    for s in args.cpu_match:
        found = cpu.find_pids(s)
        if not found:
            raise ValueError(f"--cpu-match {s!r}: no process has it in its command line")
        pids += found
    if not pids and gw is not None:
        pids = [gw.pid, *cpu.descendants(gw.pid)]  # the gateway, then its sidecars
    return pids


class Watch:
    """What is read around the run besides CPU: the gateway's RSS through warmup and window
    (the first sampled process), and its collector pauses over the window (HTTP targets)."""

    def __init__(self, sc: Scenario, address: str, pids: list[int]) -> None:
        self.rss = RssSampler(pids[0]) if pids else None
        self._http: tuple[str, int] | None = None
        if sc.api == "http":
            from bench.openai_target import split_url

            host, port, _ = split_url(address)
            self._http = (host, port)
        self._gc_before: gc_scrape.Scrape | None = None
        self.gc: gc_scrape.GcPauses | None = None

    async def _scrape(self) -> gc_scrape.Scrape | None:
        if self._http is None:
            return None
        try:
            return await gc_scrape.scrape(*self._http)
        except (OSError, TimeoutError, ValueError):
            return None

    async def window_start(self) -> None:
        self._gc_before = await self._scrape()

    async def window_end(self) -> None:
        after = await self._scrape()
        if self._gc_before is not None and after is not None:
            self.gc = gc_scrape.window(self._gc_before, after)


async def measure(
    sc: Scenario, target: Target, plan: Plan, sampler: cpu.CpuSampler, show: bool, watch: Watch
) -> tuple[list[Result], list[Result], float]:
    """(warmup results, measured results, measured window in seconds)."""
    phase = {"mode": sc.mode, "concurrency": sc.concurrency, "duration_s": sc.duration_s}
    if watch.rss is not None:
        watch.rss.start()
    try:
        warm: list[Result] = []
        if plan.warmup:
            warm = await run_phase(target, plan.warmup, **phase)  # type: ignore[arg-type]
        tally = Tally(len(plan.measured))
        progress = Progress(tally, sc.name) if show else None
        await watch.window_start()
        sampler.start()
        t0 = time.perf_counter()
        if progress is not None:
            progress.start()
        try:
            results = await run_phase(target, plan.measured, tally=tally, **phase)  # type: ignore[arg-type]
        finally:
            if progress is not None:
                await progress.stop()
        window = time.perf_counter() - t0
        sampler.stop()
        await watch.window_end()
    finally:
        if watch.rss is not None:
            await watch.rss.stop()
    return warm, results, window


async def _run(sc: Scenario, args: argparse.Namespace, out_dir: Path) -> report.Report:
    gw = None
    if args.config:
        gw = LaunchedGateway(args.config, out_dir / "gateway.log", args.gateway_log_level)
    if gw is not None:
        await gw.start(sc.model)
    try:
        address = address_for(sc, args, gw)
        pids = cpu_pids(args, gw)
        sampler = cpu.CpuSampler(pids, args.cpu_children)
        watch = Watch(sc, address, pids)
        plan = Plan(sc)
        show = args.progress if args.progress is not None else sys.stderr.isatty()
        target = make_target(sc, address)
        started = dt.datetime.now(dt.UTC)
        try:
            warm, results, window = await measure(sc, target, plan, sampler, show, watch)
        finally:
            await target.close()
        tgt = report.Target(api=sc.api, address=target.address, config=args.config)
        rep = report.build(plan, tgt, warm, results, window, sampler, started)
        memory = watch.rss.report(sc.concurrency) if watch.rss is not None else None
        rep = msgspec.structs.replace(rep, memory=memory, gc=watch.gc)
    finally:
        if gw is not None:
            await gw.stop()
    if not args.no_plots:
        try:
            from bench.plots import write_plots

            write_plots(results, [c.name for c in sc.classes], out_dir)
        except ImportError:
            print("shardgate bench: matplotlib is not installed: no plots", file=sys.stderr)
    return rep


def run(sc: Scenario, args: argparse.Namespace) -> int:
    out_dir = Path(args.out or f"bench/out/{sc.name}")
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            rep = runner.run(_run(sc, args, out_dir))
    except (ValueError, RuntimeError, OSError) as e:
        print(f"shardgate bench: {e}", file=sys.stderr)
        return 2
    path = out_dir / "report.json"
    report.write(rep, path)
    if not args.quiet:
        print(compare.summary(rep))
        print(f"report: {path}")
    return 0 if rep.requests.failed == 0 and rep.requests.sent == rep.requests.planned else 1
