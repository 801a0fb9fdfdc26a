"""One bench run end to end: target, warmup, measured window with CPU sampling, report."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import time
from pathlib import Path
from typing import Protocol

import uvloop

from bench import compare, cpu, report
from bench.launch import LaunchedGateway
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


async def measure(
    sc: Scenario, target: Target, plan: Plan, sampler: cpu.CpuSampler, show: bool
) -> tuple[list[Result], list[Result], float]:
    """(warmup results, measured results, measured window in seconds)."""
    phase = {"mode": sc.mode, "concurrency": sc.concurrency, "duration_s": sc.duration_s}
    warm: list[Result] = []
    if plan.warmup:
        warm = await run_phase(target, plan.warmup, **phase)  # type: ignore[arg-type]
    tally = Tally(len(plan.measured))
    progress = Progress(tally, sc.name) if show else None
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
    return warm, results, window


async def _run(sc: Scenario, args: argparse.Namespace, out_dir: Path) -> report.Report:
    gw = None
    if args.config:
        gw = LaunchedGateway(args.config, out_dir / "gateway.log", args.gateway_log_level)
    if gw is not None:
        await gw.start(sc.model)
    try:
        address = address_for(sc, args, gw)
        sampler = cpu.CpuSampler(cpu_pids(args, gw), args.cpu_children)
        plan = Plan(sc)
        show = args.progress if args.progress is not None else sys.stderr.isatty()
        target = make_target(sc, address)
        started = dt.datetime.now(dt.UTC)
        try:
            warm, results, window = await measure(sc, target, plan, sampler, show)
        finally:
            await target.close()
        tgt = report.Target(api=sc.api, address=target.address, config=args.config)
        rep = report.build(plan, tgt, warm, results, window, sampler, started)
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
