"""`shardgate sidecar`: run one engine sidecar."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any

import uvloop
import yaml

from engine_sidecar import config as sidecar_config
from engine_sidecar.server import serve, tls_files
from gateway import logs, procs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="sidecar config YAML")
    p.add_argument("--config-json", help="sidecar config as JSON (used by `shardgate up`)")
    p.add_argument("--name")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--model", help="sim backend: the served model name")
    p.add_argument("--profile", help="sim backend: timing profile (instant, fast, ...)")
    p.add_argument("--log-level", default="INFO")
    p.add_argument(
        "--log-format", choices=logs.FORMATS, default="json", help="stderr as JSON lines or text"
    )


def build_config(args: argparse.Namespace) -> sidecar_config.SidecarConfig:
    data: dict[str, Any] = {}
    if args.config:
        with open(args.config) as f:
            data = yaml.safe_load(f) or {}
    if args.config_json:
        data = json.loads(args.config_json)
    for key in ("name", "host", "port"):
        value = getattr(args, key)
        if value is not None:
            data[key] = value
    sim = dict(data.get("sim") or {})
    if args.model:
        sim["model"] = args.model
    if args.profile:
        sim["profile"] = args.profile
    if sim:
        data["sim"] = sim
    return sidecar_config.decode(data, f"{args.config or 'sidecar config'}: ")


def run(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, json=args.log_format == "json")  # (the gateway's lines)
    try:
        cfg = build_config(args)
        tls_files(cfg)  # certificate files that cannot load stop the start here, named
    except (ValueError, OSError) as e:
        print(f"shardgate sidecar: {e}", file=sys.stderr)
        return 2
    if cfg.backend == "vllm":  # (before vLLM is imported: its lines in the sidecar's format)
        from engine_sidecar.backends.vllm.logs import route_vllm_logs

        route_vllm_logs(args.log_format == "json", args.log_level)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(cfg, stop)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
    return 0


def main(argv: list[str] | None = None) -> int:
    procs.die_with_parent()
    p = argparse.ArgumentParser(prog="shardgate sidecar")
    add_arguments(p)
    return run(p.parse_args(argv))
