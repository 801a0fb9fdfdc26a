"""`--workers N`: N gateway processes on the same ports (SO_REUSEPORT), one per core.

The kernel spreads new connections over the workers. Each worker is a whole gateway with its own
links to every sidecar, so each holds `1/N` of every limit: tenants' and model pools' rates,
bursts and concurrency, and `1/N` of each pool's slots (its share of capacity), also after a
reload. A tenant's requests land on workers at random, so with few requests its effective limit
can be below the configured one (a burst of 2 split over 2 workers is 1 each); per-worker state
(buckets, queues, prefix affinity) is not shared. Use it where one core is the bottleneck.
With `redis:` configured, tenants' and model pools' limits are not split: every worker admits
against the shared buckets in Redis (gateway/shared_limits), and the 1/N split only applies to
the local fallback while Redis is away.

The parent makes a private runtime directory (mode 0700) and tells each worker its seat in it.
A worker serves its own metrics on `worker-<i>.sock` there; the one a /metrics scrape reaches
fetches its siblings' (`Siblings`) and answers with the merge (gateway/observability/merge.py).
A reload reaches every worker: each watches the file, SIGHUP to the parent goes to all, and a
worker that takes POST /admin/reload asks the parent to send SIGHUP to all.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from gateway import procs
from gateway.config.schema import Config
from gateway.procs import child_env

_RATES = ("requests_per_s", "tokens_per_min")
_COUNTS = ("requests_burst", "tokens_burst", "max_concurrent")


def _scale(limits: dict[str, Any], n: int) -> None:
    for key in _RATES:
        if limits.get(key) is not None:
            limits[key] = limits[key] / n
    for key in _COUNTS:
        if limits.get(key) is not None:
            limits[key] = max(1, math.ceil(limits[key] / n))


def share(config: Config, n: int) -> Config:
    """One worker's part of `config` when `n` workers serve it together."""
    if n <= 1:
        return config
    data = msgspec.to_builtins(config)
    if config.redis is None:  # with Redis the limits are shared whole (1/N only in fallback)
        for tenant in data.get("tenants", []):
            _scale(tenant, n)
            for override in (tenant.get("models") or {}).values():
                _scale(override, n)
        for limits in (data.get("model_limits") or {}).values():
            _scale(limits, n)
    data["model_capacity"] = {
        m: max(1, math.ceil(c / n)) for m, c in (data.get("model_capacity") or {}).items()
    }
    return msgspec.convert(data, Config)


def worker_socket(runtime_dir: Path, index: int) -> Path:
    return runtime_dir / f"worker-{index}.sock"


@dataclass(frozen=True, slots=True)
class Seat:
    """Where one worker sits: its index among `of` siblings, their runtime directory, and
    the pid of the parent that forwards signals to them all."""

    index: int
    of: int
    runtime_dir: Path
    parent_pid: int

    def socket(self, index: int) -> Path:
        return worker_socket(self.runtime_dir, index)

    def siblings(self) -> list[int]:
        return [i for i in range(self.of) if i != self.index]

    def reload_all(self) -> None:
        """Ask the parent to send SIGHUP to every worker (this one finds the file loaded)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.parent_pid, signal.SIGHUP)


class Workers:
    """Runs N `shardgate gateway --worker-of N` processes and forwards signals to them."""

    def __init__(
        self,
        n: int,
        config_path: str,
        http_port: int | None,
        grpc_port: int | None,
        log_level: str,
        port_offset: int = 0,
        log_format: str = "json",
    ) -> None:
        self.n = n
        self._args = ["--config", config_path, "--log-level", log_level, "--worker-of", str(n)]
        self._args += ["--log-format", log_format]
        if port_offset:
            self._args += ["--port-offset", str(port_offset)]
        if http_port is not None:
            self._args += ["--http-port", str(http_port)]
        if grpc_port is not None:
            self._args += ["--grpc-port", str(grpc_port)]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.runtime_dir: Path | None = None

    def start(self) -> None:
        self.runtime_dir = Path(tempfile.mkdtemp(prefix="shardgate-"))  # mode 0700
        cmd = [sys.executable, "-m", "gateway", "gateway", *self._args]
        cmd += ["--runtime-dir", str(self.runtime_dir)]
        self.procs = [
            subprocess.Popen([*cmd, "--worker-index", str(i)], env=child_env())
            for i in range(self.n)
        ]

    def sockets(self) -> list[Path]:
        """Where each worker answers its siblings (and its own /readyz), once started."""
        assert self.runtime_dir is not None
        return [worker_socket(self.runtime_dir, i) for i in range(self.n)]

    def signal(self, sig: signal.Signals) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(sig)

    def exited(self) -> list[int]:
        return procs.exited(self.procs)

    async def stop(self, grace_s: float) -> None:
        await procs.terminate(self.procs, grace_s)
        if self.runtime_dir is not None:
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
