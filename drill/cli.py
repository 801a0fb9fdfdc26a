"""`shardgate drill`: fault injection under load against a local (or running) cluster."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import uvloop

from drill import faults, report, runner
from drill.options import Options
from gateway.config.loader import ConfigError

EPILOG = """faults (in the order given; each is cleared and recovered from before the next):
  kill        SIGKILL a standalone sidecar, then start it again
  stop        SIGSTOP a standalone sidecar (a hang), then SIGCONT
  heartbeat   SetFaults stop_heartbeats: it keeps streaming without heartbeats
  slow        SetFaults slow_token_s: every engine step takes longer
  stall       SetFaults hang_after_tokens 0: the engine wedges while heartbeats go on
  rank-kill   SIGKILL the non-zero rank of a shard group, then start it again
  engine-kill SIGKILL the engine server behind an openai-backend sidecar (openai.command);
              its sidecar starts it again

exit status: 0 nothing lost or corrupted and every replica recovered; 1 otherwise;
2 the drill could not run (config, ports, cluster not ready).

examples:
  shardgate drill --config configs/drill.yaml --out drill/out
  shardgate drill --faults kill,heartbeat --hold 1.5 --concurrency 8
  shardgate drill --attach --faults stop,heartbeat,slow,stall   # a cluster from `shardgate up`
  shardgate drill --config configs/drill-engine.yaml --model fake-llm --faults engine-kill
"""


# Flag -> Options field; a flag left out keeps the field's default.
_FIELDS = {
    "model": "model",
    "hold": "hold_s",
    "warmup": "warmup_s",
    "settle": "settle_s",
    "recover_timeout": "recover_timeout_s",
    "drain_timeout": "drain_timeout_s",
    "ready_timeout": "ready_timeout_s",
    "slow_token": "slow_token_s",
    "concurrency": "concurrency",
    "requests": "requests",
    "request_timeout": "request_timeout_s",
    "sample_interval": "sample_interval_s",
    "log_level": "log_level",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = Options(config_path="", kinds=tuple(faults.ALL))
    p.add_argument("--config", default="configs/drill.yaml")
    p.add_argument(
        "--attach",
        action="store_true",
        help="drill a cluster that is already running (no kill faults; stop needs local pids)",
    )
    p.add_argument("--faults", default="all", help="comma-separated kinds, or all (default)")
    p.add_argument("--model", help=f"default {d.model}")
    p.add_argument("--hold", type=float, help=f"seconds each fault lasts ({d.hold_s})")
    p.add_argument("--warmup", type=float, help=f"seconds of load before a fault ({d.warmup_s})")
    p.add_argument("--settle", type=float, help=f"seconds of load after recovery ({d.settle_s})")
    p.add_argument("--recover-timeout", type=float, help=f"seconds ({d.recover_timeout_s})")
    p.add_argument("--drain-timeout", type=float, help=f"seconds ({d.drain_timeout_s})")
    p.add_argument("--ready-timeout", type=float, help=f"seconds ({d.ready_timeout_s})")
    p.add_argument("--slow-token", type=float, help=f"seconds added per step ({d.slow_token_s})")
    p.add_argument("--concurrency", type=int, help=f"streams at once ({d.concurrency})")
    p.add_argument("--requests", type=int, help=f"distinct requests in the load ({d.requests})")
    p.add_argument("--tokens", help=f"max_tokens: N or MIN-MAX ({d.min_tokens}-{d.max_tokens})")
    p.add_argument("--request-timeout", type=float, help=f"seconds ({d.request_timeout_s})")
    p.add_argument(
        "--sample-interval", type=float, help=f"seconds between scrapes ({d.sample_interval_s})"
    )
    p.add_argument("--out", help="directory for report.json, table.txt and the processes' logs")
    p.add_argument("--log-level", help=f"of the gateway and the sidecars ({d.log_level})")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "drill",
        help="inject faults into a cluster under load; report lost/corrupted requests",
        description="Failover drill: faults one after another under a steady streaming load.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)


def options(args: argparse.Namespace) -> Options:
    """ValueError names a bad flag."""
    kw: dict[str, Any] = {
        f: getattr(args, a) for a, f in _FIELDS.items() if getattr(args, a) is not None
    }
    if args.tokens:
        lo, _, hi = args.tokens.partition("-")
        try:
            kw["min_tokens"], kw["max_tokens"] = int(lo), int(hi or lo)
        except ValueError:
            raise ValueError(f"--tokens {args.tokens!r}: expected N or MIN-MAX") from None
    if args.out:
        kw["out_dir"] = Path(args.out)
    return Options(
        config_path=args.config,
        attach=args.attach,
        kinds=tuple(faults.parse_kinds(args.faults)),
        **kw,
    )


async def _main(opts: Options) -> report.DrillReport:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await runner.run(opts)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s drill: %(message)s",
        stream=sys.stderr,
    )
    try:
        opts = options(args)
    except ValueError as e:
        print(f"shardgate drill: {e}", file=sys.stderr)
        return 2
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as loop:
            result = loop.run(_main(opts))
    except (runner.DrillError, ConfigError, ValueError) as e:
        print(f"shardgate drill: {e}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("shardgate drill: interrupted; every process it started is stopped", file=sys.stderr)
        return 130
    print(report.summary(result), flush=True)
    if opts.out_dir is not None:
        path = report.write(result, opts.out_dir)
        print(f"report: {path}", flush=True)
    return 0 if result.ok else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="shardgate drill")
    add_arguments(p)
    return run(p.parse_args(argv))
