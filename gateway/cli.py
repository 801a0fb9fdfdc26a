"""The `shardgate` command: up, gateway, sidecar, check-config, bench, drill."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

import uvloop

from bench import cli as bench_cli
from drill import cli as drill_cli
from engine_sidecar import cli as sidecar_cli
from gateway import cluster, logs, procs
from gateway.app import Gateway, validate_static
from gateway.config.loader import ConfigError, load
from gateway.config.offset import moved
from gateway.config.schema import Config
from gateway.observability.logging import setup as log_setup
from gateway.workers import Seat, share

PORT_OFFSET_HELP = (
    "add N to every port of the local cluster, to run a second one beside it: the gateway's "
    "HTTP and gRPC ports and each launched sidecar's address, link_port and metrics_port "
    "(ports of 0 stay; --http-port and --grpc-port are used as given; the address of a "
    "sidecar that runs elsewhere stays); reloads keep the offset"
)


def _logging(level: str, json: bool) -> None:
    log_setup(level, json=json)


def _run(coro: object) -> int:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return int(runner.run(coro))  # type: ignore[arg-type]


async def _gateway(
    config: Config,
    path: str,
    http_port: int | None,
    grpc_port: int | None,
    worker_of: int,
    seat: Seat | None = None,
    port_offset: int = 0,
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        mine = share(config, worker_of)
        gw = Gateway(mine, http_port, grpc_port, path, worker_of, seat, port_offset=port_offset)
    except ValueError as e:  # what only building shows (Kubernetes discovery outside a cluster)
        print(f"shardgate: {e}", file=sys.stderr)
        return 2
    if gw.reloader is not None:
        loop.add_signal_handler(signal.SIGHUP, gw.reloader.reload, "SIGHUP")
    await gw.start()
    try:
        await stop.wait()
    finally:
        await gw.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    procs.die_with_parent()
    p = argparse.ArgumentParser(prog="shardgate", description="LLM-serving gateway")
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (
        ("up", "start the local sidecars of a config, then the gateway"),
        ("gateway", "run the gateway only"),
    ):
        c = sub.add_parser(name, help=text)
        c.add_argument("--config", default="configs/local.yaml")
        c.add_argument("--http-port", type=int)
        c.add_argument("--grpc-port", type=int)
        c.add_argument("--log-level", default="INFO")
        c.add_argument(
            "--log-format",
            choices=logs.FORMATS,
            help="logs on stderr (its sidecars' and workers' too) as JSON lines or text "
            "(default: json, or text where the config sets gateway.json_logs: false)",
        )
        c.add_argument("--workers", type=int, default=1, help="gateway processes sharing the ports")
        c.add_argument("--worker-of", type=int, default=1, help=argparse.SUPPRESS)
        c.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
        c.add_argument("--runtime-dir", help=argparse.SUPPRESS)
        c.add_argument(
            "--port-offset",
            type=int,
            default=0,
            metavar="N",
            help=PORT_OFFSET_HELP if name == "up" else argparse.SUPPRESS,
        )
    sidecar_cli.add_arguments(sub.add_parser("sidecar", help="run one engine sidecar"))
    c = sub.add_parser("check-config", help="validate a config file")
    c.add_argument("file")
    bench_cli.register(sub)
    drill_cli.register(sub)

    args = p.parse_args(argv)
    if args.command == "sidecar":
        return sidecar_cli.run(args)
    if args.command == "bench":
        return bench_cli.run(args)
    if args.command == "drill":
        return drill_cli.run(args)
    path = args.file if args.command == "check-config" else args.config
    try:
        config = moved(load(path), getattr(args, "port_offset", 0))
        cluster.check_launch(config)
        validate_static(config)
    except (ConfigError, ValueError) as e:
        print(f"shardgate: {e}", file=sys.stderr)
        return 2
    if args.command == "check-config":
        print(f"{path}: ok")
        return 0
    args.log_format = args.log_format or ("json" if config.gateway.json_logs else "text")
    _logging(args.log_level, args.log_format == "json")
    if args.workers < 1 or args.worker_of < 1:
        print("shardgate: --workers must be at least 1", file=sys.stderr)
        return 2
    if args.command == "up" or args.worker_of == 1:  # (a worker shares its parent's ports)
        up = args.command == "up"
        busy = cluster.port_conflict(config, args.http_port, args.grpc_port, sidecars=up)
        if busy is not None:
            print(f"shardgate: {busy}", file=sys.stderr)
            return 1
    if args.command == "up":
        ports = (args.http_port, args.grpc_port)
        how = (args.log_level, args.workers, args.port_offset, args.log_format)
        return _run(cluster.up(config, path, *ports, *how))
    if args.workers > 1:
        return _run(cluster.run_workers(config, path, args))
    seat = None
    if args.runtime_dir is not None and args.worker_of > 1:
        seat = Seat(args.worker_index, args.worker_of, Path(args.runtime_dir), os.getppid())
    ports = (args.http_port, args.grpc_port)
    return _run(_gateway(config, path, *ports, args.worker_of, seat, args.port_offset))
