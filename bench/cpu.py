"""CPU time and memory of processes from /proc, sampled at the edges of the measured window.

utime + stime of /proc/<pid>/stat (and, with children, of every live descendant plus the
cutime + cstime of reaped ones). Clock ticks are coarse (10 ms), so windows should be seconds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str]:
    text = (PROC / str(pid) / "stat").read_text()
    # The command name may hold spaces and parentheses: split after the last ')'.
    return text[text.rindex(")") + 2 :].split()


def cpu_ticks(pid: int, *, reaped_children: bool = False) -> int:
    f = _stat_fields(pid)  # f[0] is field 3 (state) of proc(5)
    ticks = int(f[11]) + int(f[12])
    if reaped_children:
        ticks += int(f[13]) + int(f[14])
    return ticks


def parent_of(pid: int) -> int:
    return int(_stat_fields(pid)[1])


def rss_kib(pid: int) -> int:
    for line in (PROC / str(pid) / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cmdline(pid: int) -> str:
    raw = (PROC / str(pid) / "cmdline").read_bytes()
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _pids() -> list[int]:
    return [int(p.name) for p in PROC.iterdir() if p.name.isdigit()]


def find_pids(substring: str) -> list[int]:
    """Processes whose command line contains `substring` (never this process or its parents)."""
    skip = {os.getpid(), os.getppid()}
    found = []
    for pid in _pids():
        if pid in skip:
            continue
        try:
            if substring in cmdline(pid):
                found.append(pid)
        except OSError:
            continue
    return sorted(found)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for p in _pids():
        try:
            children.setdefault(parent_of(p), []).append(p)
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


@dataclass(slots=True)
class ProcessSample:
    pid: int
    cmdline: str
    children: bool
    ticks_start: int = 0
    ticks_end: int = 0
    rss_initial_kib: int = 0  # before the warmup
    rss_start_kib: int = 0
    rss_end_kib: int = 0
    alive: bool = True

    def _ticks(self) -> int:
        if not self.children:
            return cpu_ticks(self.pid)
        total = cpu_ticks(self.pid, reaped_children=True)
        for c in descendants(self.pid):
            try:
                total += cpu_ticks(c)
            except OSError:
                continue
        return total

    def start(self) -> None:
        self.ticks_start = self._ticks()
        self.rss_start_kib = rss_kib(self.pid)

    def stop(self) -> None:
        try:
            self.ticks_end = self._ticks()
            self.rss_end_kib = rss_kib(self.pid)
        except OSError:
            self.alive = False
            self.ticks_end = self.ticks_start

    @property
    def cpu_s(self) -> float:
        return (self.ticks_end - self.ticks_start) / TICKS_PER_S


class CpuSampler:
    def __init__(self, pids: list[int], children: bool) -> None:
        self.samples = [ProcessSample(p, cmdline(p), children) for p in dict.fromkeys(pids)]
        for s in self.samples:
            s.rss_initial_kib = rss_kib(s.pid)
        self._client_start = 0.0
        self.client_cpu_s = 0.0

    def start(self) -> None:
        for s in self.samples:
            s.start()
        t = os.times()
        self._client_start = t.user + t.system

    def stop(self) -> None:
        t = os.times()
        self.client_cpu_s = t.user + t.system - self._client_start
        for s in self.samples:
            s.stop()
