"""Scheduling to latency targets: goodput per class from 50% to 150% of capacity, with the
gateway scheduling to the targets and without (`scheduling.objectives: false`).

A fleet of sim sidecars on a timing profile with real prefill costs, the KV-routing workload
(bench/kv_routing.py: groups sharing a long prefix, precise prefix routing), and two tenants:
`interactive` (class 1, TTFT target `--ttft-high-ms`) and `batch` (class -1, sheddable, TTFT
target `--ttft-low-ms`), each half of the requests, their targets sent as `x-slo-ttft-ms`.
First the capacity: a closed loop of `--closed-factor` x the fleet's slots, its requests/s.
Then, for each mode, a fresh cluster and Poisson arrivals at each `--loads` fraction of that
capacity: per class, goodput (requests within their target) as a share of capacity, TTFT p90
and errors; and the gateway's prediction error p50 (shardgate_prediction_error_ratio).

    .venv/bin/python -m bench.objectives --loads 0.5,1.0,1.2,1.5 --requests 600
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench import kv_routing
from bench.kv_routing import metrics, wait_ready

MODES = {"objectives": "true", "today": "false"}


TENANTS = (
    "tenants:\n"
    "  - {name: interactive, keys: [key-interactive], default_priority: 1}\n"
    "  - {name: batch, keys: [key-batch], default_priority: -1}\n"
)


def config(a: argparse.Namespace, mode: str, port: int, tenants: str = TENANTS) -> str:
    """The KV-routing bench's fleet (precise prefix routing), with tenants and the mode."""
    head, _, sidecars = kv_routing.config(a, "precise", port).partition("sidecars:\n")
    return f"{head}scheduling: {{objectives: {MODES[mode]}}}\n{tenants}sidecars:\n{sidecars}"


@contextlib.contextmanager
def cluster(cfg: Path, port: int) -> Iterator[None]:
    """`shardgate up` on `cfg`, ready, and stopped at the end."""
    cmd = [sys.executable, "-m", "gateway", "up", "--config", str(cfg), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, proc)
        time.sleep(1.0)  # (every sidecar linked)
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def scenario(a: argparse.Namespace, closed: bool) -> str:
    slots = a.replicas * a.max_num_seqs
    mode = (
        f"mode: closed\nconcurrency: {int(slots * a.closed_factor)}\n"
        if closed
        else "mode: open\nrate_rps: 1\nconcurrency: 4096\n"
    )
    return (
        "name: objectives\n"
        + mode
        + f"requests: {a.requests}\n"
        + f"warmup_requests: {a.warmup}\n"
        + f"prefix: {{count: {a.groups}, tokens: {a.prefix_tokens}, fraction: 1.0}}\n"
        + f"prompt_tokens: {a.suffix_tokens}\n"
        + f"output_tokens: {a.output_tokens}\n"
        + "ignore_eos: true\n"
        + f"seed: {a.seed}\n"
        + "request_timeout_s: 300\n"
        + "classes:\n"
        + f"  - {{name: interactive, api_key: key-interactive, slo_ttft_ms: {a.ttft_high_ms}}}\n"
        + f"  - {{name: batch, api_key: key-batch, slo_ttft_ms: {a.ttft_low_ms}}}\n"
    )


def run_bench(a: argparse.Namespace, work: Path, name: str, closed: bool, rate: float) -> Any:
    scen = work / f"{name}.yaml"
    scen.write_text(scenario(a, closed))
    out = work / name
    cmd = [sys.executable, "-m", "gateway", "bench", "--url", f"http://127.0.0.1:{a.port}"]
    cmd += ["--scenario", str(scen), "--out", str(out), "--quiet", "--no-plots", "--no-progress"]
    if not closed:
        cmd += ["--rate", f"{rate:.3f}"]
    subprocess.run(cmd, check=False)  # (exits 1 when any request failed: a refusal counts)
    return json.loads((out / "report.json").read_text())


def error_p50(before: dict[str, float], after: dict[str, float], figure: str) -> float | None:
    """The median of the prediction error histogram's increase, by linear interpolation."""
    prefix = "shardgate_prediction_error_ratio_bucket{"
    buckets = []
    for name, value in after.items():
        if name.startswith(prefix) and f'figure="{figure}"' in name:
            le = name.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets.append((bound, value - before.get(name, 0.0)))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0.0
    if not total:
        return None
    lo_bound, lo_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= total / 2:
            if bound == float("inf"):
                return lo_bound
            share = (total / 2 - lo_count) / max(count - lo_count, 1e-9)
            return lo_bound + share * (bound - lo_bound)
        lo_bound, lo_count = bound, count
    return None


def row(mode: str, load: float, capacity: float, report: Any, errs: dict[str, Any]) -> Any:
    out: dict[str, Any] = {"mode": mode, "load": load, "rate": round(load * capacity, 2)}
    total = 0.0
    for c in report["classes"]:
        g = c["goodput"]["requests_per_s"]
        total += g
        out[c["name"]] = {
            "goodput_of_capacity": round(g / capacity, 3),
            "ttft_p90_ms": round(c["latency"]["ttft_ms"]["p90"], 1),
            "ok": c["requests"]["ok"],
            "errors": c["errors"],
        }
    out["goodput_of_capacity"] = round(total / capacity, 3)
    out.update(errs)
    return out


def run_mode(a: argparse.Namespace, mode: str, work: Path, capacity: float | None) -> Any:
    cfg = work / f"{mode}.yaml"
    cfg.write_text(config(a, mode, a.port))
    rows = []
    with cluster(cfg, a.port):
        if capacity is None:
            closed = run_bench(a, work, f"{mode}-closed", True, 0.0)
            capacity = float(closed["throughput"]["requests_per_s"])
            ttft = closed["latency"]["ttft_ms"]
            print(f"capacity {capacity:.2f} req/s (TTFT p50 {ttft['p50']:.0f} ms)", flush=True)
        for load in a.loads:
            before = metrics(a.port)
            report = run_bench(a, work, f"{mode}-{load}", False, load * capacity)
            after = metrics(a.port)
            errs = {f"pred_err_p50_{f}": error_p50(before, after, f) for f in ("ttft", "tpot")}
            rows.append(row(mode, load, capacity, report, errs))
            print(json.dumps(rows[-1]), flush=True)
    return capacity, rows


FAIR_TENANTS = (
    "tenants:\n  - {name: long, keys: [key-long]}\n  - {name: short, keys: [key-short]}\n"
)


def tenant_tokens(port: int) -> dict[str, float]:
    """Prompt + completion tokens served per tenant so far."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = defaultdict(float)
    names = ("shardgate_prompt_tokens_total", "shardgate_completion_tokens_total")
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names:
                out[sample.labels["tenant"]] += sample.value
    return out


def fairness(a: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Two tenants of one class at saturation, `long` sending `--long-tokens` prompts and
    `short` `--suffix-tokens` ones, each offering `--fair-rate` requests/s (no shared prefix):
    their shares of the tokens served (prompt + completion) between two scrapes taken while
    both are backlogged."""
    cfg = work / "fair.yaml"
    cfg.write_text(config(a, "objectives", a.port, FAIR_TENANTS))
    scen = work / "fair-scenario.yaml"
    scen.write_text(
        "name: fairness\nmode: open\nrate_rps: 1\nconcurrency: 8192\n"
        f"requests: {a.fair_requests}\nprompt_tokens: {a.suffix_tokens}\n"
        f"output_tokens: {a.output_tokens}\nignore_eos: true\nseed: {a.seed}\n"
        "request_timeout_s: 600\nclasses:\n"
        f"  - {{name: long, api_key: key-long, prompt_tokens: {a.long_tokens}}}\n"
        "  - {name: short, api_key: key-short}\n"
    )
    with cluster(cfg, a.port):
        cmd = [sys.executable, "-m", "gateway", "bench", "--url", f"http://127.0.0.1:{a.port}"]
        cmd += ["--scenario", str(scen), "--out", str(work / "fair"), "--quiet"]
        cmd += ["--no-plots", "--no-progress", "--rate", str(2 * a.fair_rate)]
        load = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(a.fair_settle_s)  # (both tenants' lines fill)
            before, before_tokens = metrics(a.port), tenant_tokens(a.port)
            time.sleep(a.fair_window_s)
            after, after_tokens = metrics(a.port), tenant_tokens(a.port)
        finally:
            load.kill()
            load.wait()
    served = {t: after_tokens[t] - before_tokens[t] for t in ("long", "short")}
    whole = sum(served.values()) or 1.0
    waits = [
        sum(v - before.get(k, 0.0) for k, v in after.items() if k.startswith(name))
        for name in ("shardgate_queue_wait_seconds_sum", "shardgate_queue_wait_seconds_count")
    ]
    return {
        "served_tokens": served,
        "shares": {t: round(n / whole, 3) for t, n in served.items()},
        "window_s": a.fair_window_s,
        "mean_queue_wait_s": round(waits[0] / waits[1], 2) if waits[1] else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--groups", type=int, default=24)
    p.add_argument("--prefix-tokens", type=int, default=2000)
    p.add_argument("--suffix-tokens", type=int, default=64)
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--kv-demand", type=float, default=0.75)
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--profile", default="llama-70b-a100-tp8")
    p.add_argument("--ttft-high-ms", type=float, default=1500)
    p.add_argument("--ttft-low-ms", type=float, default=3000)
    p.add_argument("--closed-factor", type=float, default=1.5)
    p.add_argument("--loads", default="0.5,1.0,1.2,1.5", help="fractions of capacity")
    p.add_argument("--requests", type=int, default=600)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--modes", default="today,objectives")
    p.add_argument("--capacity", type=float, help="req/s; measured when left out")
    p.add_argument("--port", type=int, default=18600)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the rows here too")
    p.add_argument("--fairness", action="store_true", help="run the two-tenant fairness case")
    p.add_argument("--long-tokens", type=int, default=2000)
    p.add_argument("--fair-rate", type=float, default=40.0, help="requests/s per tenant")
    p.add_argument("--fair-requests", type=int, default=20000)
    p.add_argument("--fair-settle-s", type=float, default=20.0)
    p.add_argument("--fair-window-s", type=float, default=40.0)
    a = p.parse_args()
    if a.fairness:
        with tempfile.TemporaryDirectory(prefix="fairness-") as tmp:
            print(json.dumps(fairness(a, Path(tmp))))
        return
    a.loads = [float(x) for x in a.loads.split(",")]
    rows: list[Any] = []
    capacity = a.capacity
    with tempfile.TemporaryDirectory(prefix="objectives-") as tmp:
        for mode in a.modes.split(","):
            capacity, got = run_mode(a, mode, Path(tmp), capacity)
            rows += got
    if a.json:
        Path(a.json).write_text(json.dumps({"capacity": capacity, "rows": rows}, indent=1))
    print(f"\n{a.replicas} sims ({a.profile}), capacity {capacity:.2f} req/s (closed loop)")
    print("| scheduling | load | goodput | interactive: goodput, TTFT p90 | batch: goodput, "
          "TTFT p90 | errors | pred. error p50 TTFT / TPOT |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        i, b = r["interactive"], r["batch"]
        errors = {k: v for c in (i, b) for k, v in c["errors"].items()}
        pe = [r["pred_err_p50_ttft"], r["pred_err_p50_tpot"]]
        pes = " / ".join("-" if x is None else f"{x:.0%}" for x in pe)
        print(
            f"| {r['mode']} | {r['load']:.0%} | {r['goodput_of_capacity']:.0%} | "
            f"{i['goodput_of_capacity']:.0%}, {i['ttft_p90_ms']:,} ms | "
            f"{b['goodput_of_capacity']:.0%}, {b['ttft_p90_ms']:,} ms | {errors or '-'} | {pes} |"
        )


if __name__ == "__main__":
    main()
