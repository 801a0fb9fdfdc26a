"""The drilled cluster's processes: launched by the drill, or found in a running cluster.

`LocalCluster` starts each sidecar of the config that has a `launch` section
(`python -m engine_sidecar --config-json ...`) and the gateway (`shardgate gateway --config ...`)
as separate child processes, so that single sidecars can be killed, stopped and restarted.
`AttachedCluster` only finds the sidecars' processes by their listening ports: it may stop and
continue them (never kill them: it could not start them again).

An openai-backend sidecar that runs its engine server as its own child (`openai.command`) starts
it again when it dies: a local drill may kill that server (found by the port of its base_url).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from drill.pids import pid_listening_on
from drill.procs import Child, stop_all
from gateway.cluster import sidecar_argv
from gateway.config.schema import Config

log = logging.getLogger(__name__)


class Controls(Protocol):
    """What fault injection may do to a sidecar's process, by the sidecar's config name."""

    def can_signal(self, name: str) -> bool: ...

    def can_restart(self, name: str) -> bool: ...

    def send(self, name: str, sig: signal.Signals) -> None: ...

    def kill(self, name: str) -> None: ...

    def restart(self, name: str) -> None: ...

    def can_kill_engine(self, name: str) -> bool:
        """Whether the sidecar's engine server may be killed (its sidecar restarts it)."""
        ...

    def kill_engine(self, name: str) -> None: ...

    def release(self) -> None:
        """Always called at the end: continue what is stopped, stop what the drill started."""


def engine_port(launch: dict[str, Any] | None) -> int | None:
    """The port of the engine server that a launched openai-backend sidecar runs as its child
    (None: the sidecar runs none)."""
    if not launch or launch.get("backend") != "openai":
        return None
    openai = launch.get("openai") or {}
    if not openai.get("command"):
        return None
    url = urlsplit(openai.get("base_url", "http://127.0.0.1:8000"))
    if url.hostname not in ("127.0.0.1", "localhost", "::1"):
        return None  # (a server elsewhere: not a process of this machine)
    return url.port or (443 if url.scheme == "https" else 80)


def kill_listener(port: int) -> None:
    """SIGKILL the process listening on `port` (its whole process group where it leads one, as
    an engine server that its sidecar started in a session of its own does)."""
    pid = pid_listening_on(port)
    if pid is None:
        raise RuntimeError(f"no process listens on port {port}")
    if os.getpgid(pid) == pid:
        os.killpg(pid, signal.SIGKILL)
    else:
        os.kill(pid, signal.SIGKILL)


def port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


def busy_ports(config: Config) -> list[str]:
    """The addresses a local cluster of `config` would listen on that are taken already."""
    g = config.gateway
    wanted = [(g.http.host, g.http.port), (g.grpc.host, g.grpc.port)]
    wanted += [
        (e.address.rpartition(":")[0], port_of(e.address)) for e in config.sidecars if e.launch
    ]
    busy = []
    for host, port in wanted:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                busy.append(f"{host}:{port}")
    return busy


class LocalCluster:
    def __init__(self, config_path: str, config: Config, log_dir: Path, log_level: str) -> None:
        self.sidecars: dict[str, Child] = {}
        self.engine_ports: dict[str, int] = {}
        for e in config.sidecars:
            if e.launch is None:
                continue
            port = engine_port(e.launch)
            if port is not None:
                self.engine_ports[e.name] = port
            argv = sidecar_argv(e, log_level)
            self.sidecars[e.name] = Child(e.name, argv, log_dir / f"{e.name}.log")
        gateway_argv = [
            sys.executable,
            "-m",
            "gateway",
            "gateway",
            "--config",
            config_path,
            "--log-level",
            log_level,
        ]
        self.gateway = Child("gateway", gateway_argv, log_dir / "gateway.log")

    def start(self) -> None:
        for child in self.sidecars.values():
            child.start()
        self.gateway.start()

    def dead(self) -> list[str]:
        """Children that exited although the drill did not stop them."""
        return [c.name for c in (*self.sidecars.values(), self.gateway) if not c.alive]

    def can_signal(self, name: str) -> bool:
        return name in self.sidecars

    def can_restart(self, name: str) -> bool:
        return name in self.sidecars

    def send(self, name: str, sig: signal.Signals) -> None:
        self.sidecars[name].signal(sig)

    def kill(self, name: str) -> None:
        self.sidecars[name].kill()

    def restart(self, name: str) -> None:
        self.sidecars[name].start()

    def can_kill_engine(self, name: str) -> bool:
        return name in self.engine_ports

    def kill_engine(self, name: str) -> None:
        kill_listener(self.engine_ports[name])

    def release(self) -> None:
        stop_all([self.gateway, *self.sidecars.values()])


class AttachedCluster:
    def __init__(self, config: Config) -> None:
        self._pids: dict[str, int] = {}
        gateway_pid = pid_listening_on(config.gateway.http.port)
        for e in config.sidecars:
            pid = pid_listening_on(port_of(e.address))
            if pid is None or pid == gateway_pid:
                log.info("no process of its own found for %s: signals are off for it", e.name)
                continue
            self._pids[e.name] = pid
        self._stopped: set[int] = set()

    def can_signal(self, name: str) -> bool:
        return name in self._pids

    def can_restart(self, name: str) -> bool:
        return False

    def send(self, name: str, sig: signal.Signals) -> None:
        pid = self._pids[name]
        os.kill(pid, sig)
        if sig is signal.SIGSTOP:
            self._stopped.add(pid)
        elif sig is signal.SIGCONT:
            self._stopped.discard(pid)

    def kill(self, name: str) -> None:
        raise RuntimeError("an attached drill does not kill processes it cannot restart")

    def restart(self, name: str) -> None:
        raise RuntimeError("an attached drill cannot restart processes")

    def can_kill_engine(self, name: str) -> bool:
        return False  # (whether anything would start the server again is not known)

    def kill_engine(self, name: str) -> None:
        raise RuntimeError("an attached drill does not kill engine servers")

    def release(self) -> None:
        for pid in self._stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self._stopped.clear()
