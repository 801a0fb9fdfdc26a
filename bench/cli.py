"""`shardgate bench`: run a scenario against a gateway (or a sidecar) and report; and
`shardgate bench compare A.json B.json`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bench import scenario as scenarios

EPILOG = """targets (one of; default http://127.0.0.1:8080):
  --url http://HOST:PORT   the OpenAI HTTP/SSE API of a running gateway
  --grpc HOST:PORT         the gRPC API of a running gateway
  --engine HOST:PORT       one sidecar's Engine/Generate (no gateway); with --api link,
                           that sidecar's TCP link (as the gateway talks to it)
  --config FILE            start `shardgate up --config FILE`, bench it, stop it
                           (CPU is then sampled for that gateway process and,
                           separately, for each of its sidecars)

examples:
  shardgate bench --config configs/bench.yaml --scenario W2
  shardgate bench --url http://127.0.0.1:8080 --scenario W1 --requests 50 --cpu-match 'shardgate up'
  shardgate bench compare bench/out/W2/report.json /tmp/W2-new/report.json
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="shardgate bench",
        description="Load generator that verifies every stream; writes a JSON report and plots.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--scenario", default="W1", help="name in bench/scenarios/ or a YAML path")
    t = p.add_argument_group("target")
    t.add_argument("--url")
    t.add_argument("--grpc")
    t.add_argument("--engine")
    t.add_argument("--config")
    t.add_argument(
        "--gateway-log-level",
        default="WARNING",
        help="of a gateway started with --config (INFO: one log line per request)",
    )
    o = p.add_argument_group("scenario overrides")
    o.add_argument("--api", choices=["http", "grpc", "engine", "link"])
    o.add_argument("--endpoint", choices=["chat", "completions"])
    o.add_argument("--model")
    o.add_argument("--mode", choices=["closed", "open"])
    o.add_argument("--concurrency", type=int, help="closed loop streams / open loop in-flight cap")
    o.add_argument("--rate", type=float, dest="rate_rps", help="open loop: requests per second")
    o.add_argument("--requests", type=int)
    o.add_argument("--duration", type=float, dest="duration_s", help="stop sending after this")
    o.add_argument("--warmup", type=int, dest="warmup_requests")
    o.add_argument("--prompt-tokens", help="N, MIN-MAX or lognormal:MEDIAN,SIGMA,MAX")
    o.add_argument("--output-tokens", "--max-tokens", dest="output_tokens", help="same forms")
    o.add_argument("--no-ignore-eos", action="store_true")
    o.add_argument("--seed", type=int)
    o.add_argument("--timeout", type=float, dest="request_timeout_s")
    c = p.add_argument_group("cpu sampling")
    c.add_argument("--cpu-pid", type=int, action="append", default=[], metavar="PID")
    c.add_argument("--cpu-match", action="append", default=[], metavar="SUBSTRING")
    c.add_argument("--cpu-children", action="store_true", help="add each process's children")
    r = p.add_argument_group("output")
    r.add_argument("--out", help="report directory (default bench/out/<scenario name>)")
    r.add_argument("--progress", action="store_true", default=None, help="even when not a TTY")
    r.add_argument("--no-progress", action="store_false", dest="progress", default=None)
    r.add_argument("--no-plots", action="store_true")
    r.add_argument("--quiet", action="store_true", help="no summary on stdout")
    return p


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in (
        "api",
        "endpoint",
        "model",
        "mode",
        "concurrency",
        "rate_rps",
        "requests",
        "duration_s",
        "warmup_requests",
        "seed",
        "request_timeout_s",
    ):
        value = getattr(args, name)
        if value is not None:
            out[name] = value
    if args.api is None:
        for flag, api in (("grpc", "grpc"), ("engine", "engine"), ("url", "http")):
            if getattr(args, flag):
                out["api"] = api
                break
    if args.rate_rps is not None and args.mode is None:
        out["mode"] = "open"
    for name in ("prompt_tokens", "output_tokens"):
        if getattr(args, name) is not None:
            out[name] = scenarios.parse_length(getattr(args, name))
    if args.no_ignore_eos:
        out["ignore_eos"] = False
    return out


def _compare(argv: list[str]) -> int:
    from bench import compare, report

    p = argparse.ArgumentParser(
        prog="shardgate bench compare", description="two reports side by side"
    )
    p.add_argument("a")
    p.add_argument("b")
    args = p.parse_args(argv)
    try:
        a, b = report.read(args.a), report.read(args.b)
    except ValueError as e:
        print(f"shardgate bench: {e}", file=sys.stderr)
        return 2
    print(compare.side_by_side(a, b, args.a, args.b))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["compare"]:
        return _compare(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        sc = scenarios.override(scenarios.load(args.scenario), overrides(args))
    except scenarios.ScenarioError as e:
        print(f"shardgate bench: {e}", file=sys.stderr)
        return 2
    from bench import session

    return session.run(sc, args)


def register(sub: Any) -> None:
    """Adds `bench` to the `shardgate` command; its own parser reads the rest of the line."""
    c = sub.add_parser(
        "bench",
        help="load generator: verify every stream, report (shardgate bench -h)",
        add_help=False,
        prefix_chars="+",
    )
    c.add_argument("bench_argv", nargs="*")


def run(args: argparse.Namespace) -> int:
    return main(list(args.bench_argv))
