"""A whole drill: cluster up, a reference run, then each fault under load, then the report.

Per fault: start the load, inject after `warmup_s`, clear after `hold_s`, wait until the gateway
shows the replica back (bounded), let the load run `settle_s` more, stop sending and drain. The
window's requests are judged against the reference run; the gateway's counters are read before
and after; its sampled states give the detection and recovery times.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import grpc

from drill import engine, faults, report, scrape, timeline, topology
from drill.classify import Tally, problem, tally
from drill.cluster import AttachedCluster, Controls, LocalCluster, busy_ports
from drill.engine import SidecarInfo
from drill.load import Load
from drill.monitor import Monitor
from drill.options import Options
from drill.requests import RequestRecord, make_specs
from gateway.config.loader import load as load_config
from gateway.config.schema import Config

log = logging.getLogger("drill")

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class DrillError(Exception):
    """The drill could not run (not: a fault was handled badly, which the report tells)."""


def base_url(config: Config) -> str:
    host = config.gateway.http.host
    if host not in LOOPBACK:
        raise DrillError(f"the drill sends load to loopback only, not to {host}")
    return f"http://{host}:{config.gateway.http.port}"


async def run(opts: Options) -> report.DrillReport:
    config = load_config(opts.config_path)
    url = base_url(config)
    log_dir = (opts.out_dir or Path(tempfile.mkdtemp(prefix="shardgate-drill-"))) / "logs"
    controls: Controls
    local: LocalCluster | None = None
    if opts.attach:
        controls = AttachedCluster(config)
    else:
        busy = busy_ports(config)
        if busy:
            raise DrillError(
                f"ports in use: {', '.join(busy)} (a cluster already running? try --attach)"
            )
        controls = local = LocalCluster(opts.config_path, config, log_dir, opts.log_level)
    try:
        if local is not None:
            local.start()
            log.info(
                "started %d sidecars and the gateway; logs in %s", len(local.sidecars), log_dir
            )
        connector = aiohttp.TCPConnector(limit=opts.concurrency + 8)
        async with aiohttp.ClientSession(connector=connector) as session:
            monitor = Monitor(session, url, opts.model, opts.sample_interval_s)
            monitor.start()
            try:
                return await _drill(opts, config, url, session, monitor, controls, local)
            finally:
                await monitor.close()
    finally:
        controls.release()


async def _topology(config: Config, timeout_s: float) -> list[SidecarInfo]:
    try:
        async with asyncio.timeout(timeout_s):
            return list(
                await asyncio.gather(
                    *(engine.info(e.name, e.address, timeout_s) for e in config.sidecars)
                )
            )
    except (TimeoutError, grpc.aio.AioRpcError) as e:
        raise DrillError(f"sidecars did not answer Info within {timeout_s:g} s: {e}") from None


async def _drill(
    opts: Options,
    config: Config,
    url: str,
    session: aiohttp.ClientSession,
    monitor: Monitor,
    controls: Controls,
    local: LocalCluster | None,
) -> report.DrillReport:
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    sidecars = await _topology(config, opts.ready_timeout_s)
    addresses = [s.address for s in sidecars]
    baseline = topology.replica_count(sidecars)

    def whole(samples: Sequence[timeline.Sample]) -> bool:
        return timeline.recovered_now(samples, addresses, baseline)

    if not await monitor.wait_for(whole, opts.ready_timeout_s):
        dead = local.dead() if local is not None else []
        raise DrillError(
            f"the gateway did not show {baseline} routable replicas and every sidecar UP within "
            f"{opts.ready_timeout_s:g} s" + (f"; exited: {dead}" if dead else "")
        )
    planned, skipped = faults.plan(opts.kinds, sidecars, controls)
    for s in skipped:
        log.warning("skipping %s", s)

    specs = make_specs(opts.requests, opts.min_tokens, opts.max_tokens)
    by_index = {s.index: s for s in specs}
    load = Load(session, url, opts.model, specs, opts.concurrency, opts.request_timeout_s)
    log.info("reference run: %d distinct requests", len(specs))
    refs = await load.once_each()
    bad = [(r, why) for r in refs if (why := problem(r, by_index[r.index])) is not None]
    if bad:
        r, why = bad[0]
        raise DrillError(f"{len(bad)} reference requests failed, e.g. request {r.index}: {why}")
    references = {r.index: r.text for r in refs}

    rows: list[report.FaultReport] = []
    try:
        for fault in planned:
            if not await monitor.wait_for(whole, opts.recover_timeout_s):
                log.warning("the cluster is not whole before %s; injecting anyway", fault.kind)
            window = Window(opts, fault, sidecars, baseline, url, session, monitor, controls)
            records = await window.run(load)
            tally_ = tally(records, by_index, references)
            rows.append(window.report(records, tally_))
            log.info(
                "%s on %s: %d sent, %d lost, %d corrupted",
                fault.kind,
                fault.target.name,
                tally_.sent,
                tally_.lost,
                tally_.corrupted,
            )
            if local is not None and "gateway" in local.dead():
                raise DrillError(f"the gateway exited; see {local.gateway.log_path}")
    finally:
        await load.close()
    return report.DrillReport(
        started_at=started_at,
        config=opts.config_path,
        mode="attach" if opts.attach else "local",
        gateway=url,
        model=opts.model,
        concurrency=opts.concurrency,
        distinct_requests=len(specs),
        tokens=(opts.min_tokens, opts.max_tokens),
        reference=report.Totals(sent=len(refs), completed=len(refs)),
        faults=rows,
        skipped=skipped,
        totals=report.totals(rows),
        ok=report.passed(rows),
    )


class Window:
    """One fault under load, from the load's start to its drain."""

    def __init__(
        self,
        opts: Options,
        fault: faults.Fault,
        sidecars: Sequence[SidecarInfo],
        baseline: int,
        url: str,
        session: aiohttp.ClientSession,
        monitor: Monitor,
        controls: Controls,
    ) -> None:
        self.opts = opts
        self.fault = fault
        self.targets = [fault.target.address]
        self.head = topology.head_of(fault.target, sidecars)
        self.baseline = baseline
        self.url = url
        self.session = session
        self.monitor = monitor
        self.controls = controls
        self.start = self.injected = self.cleared = self.end = 0.0
        self.before = self.after = scrape.Counters()

    async def _counters(self) -> scrape.Counters:
        return scrape.counters(await scrape.fetch_metrics(self.session, self.url, 5.0))

    async def run(self, load: Load) -> list[RequestRecord]:
        o, f = self.opts, self.fault
        self.before = await self._counters()
        self.start = time.monotonic()
        load.start(ramp_s=o.warmup_s)
        await asyncio.sleep(o.warmup_s)
        log.info("%s on %s (%s): injecting", f.kind, f.target.name, f.target.address)
        self.injected = time.monotonic()
        cleared = False
        try:
            try:
                await faults.inject(f, self.controls, o.slow_token_s)
            except grpc.aio.AioRpcError as e:
                raise DrillError(
                    f"SetFaults on {f.target.address}: {e.code().name} {e.details()}"
                ) from None
            await asyncio.sleep(o.hold_s)
            self.cleared = time.monotonic()
            await faults.clear(f, self.controls)
            cleared = True
        finally:
            if not cleared:  # interrupted: leave no fault behind (processes: see release)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(faults.clear(f, self.controls), 5.0)
        log.info("%s on %s: cleared; waiting for recovery", f.kind, f.target.name)
        await self.monitor.wait_for(
            lambda s: timeline.recovered_now(s, self.targets, self.baseline), o.recover_timeout_s
        )
        await asyncio.sleep(o.settle_s)
        records = await load.stop(o.drain_timeout_s)
        await asyncio.sleep(2 * o.sample_interval_s)  # a last sample or two of the window
        self.end = time.monotonic()
        self.after = await self._counters()
        return records

    def report(self, records: list[RequestRecord], t: Tally) -> report.FaultReport:
        f = self.fault
        samples = self.monitor.window(self.start, self.end)
        return report.fault_report(
            kind=f.kind.value,
            description=faults.DESCRIPTIONS[f.kind],
            target=f.target.name,
            address=f.target.address,
            hold_s=round(self.cleared - self.injected, 3),
            tally=t,
            counters=self.after.minus(self.before),
            timings=timeline.timings(
                samples, self.targets, self.baseline, self.injected, self.cleared
            ),
            serving_s=report.serving_after(records, self.head, self.cleared),
            samples=len(samples),
            records=records,
            timeline=timeline.changes(samples, self.targets, self.injected),
            sample_gap_s=timeline.max_gap(samples, self.injected, self.end),
        )
