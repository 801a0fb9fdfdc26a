"""The gateway's memory while many streams are open: RSS sampled through the whole run.

`RssSampler` reads /proc/PID/status (VmRSS) of the first sampled process (the gateway) every
`interval_s` from before the warmup to the end of the measured window, and keeps the peak.
Bytes per stream = (peak - before) / the scenario's concurrency: what holding that many
streams open costs the gateway, heap growth included.
"""

from __future__ import annotations

import asyncio

import msgspec

from bench.cpu import rss_kib
from gateway.tasks import stop


class StreamMemory(msgspec.Struct, frozen=True, kw_only=True):
    pid: int
    streams: int  # the scenario's concurrency: streams open at once in the closed loop
    samples: int
    rss_before_kib: int  # before the warmup
    rss_peak_kib: int  # the highest VmRSS read during the warmup and the measured window
    rss_after_kib: int  # once the measured window's streams have ended
    bytes_per_stream: float  # (peak - before) / streams


class RssSampler:
    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.before_kib = rss_kib(pid)
        self.peak_kib = self.before_kib
        self.after_kib = self.before_kib
        self.samples = 1
        self._task: asyncio.Task[None] | None = None

    def read(self) -> int:
        try:
            kib = rss_kib(self.pid)
        except OSError:  # the process is gone: keep what was seen
            return self.peak_kib
        self.samples += 1
        self.peak_kib = max(self.peak_kib, kib)
        return kib

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.read()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop(task)
        self.after_kib = self.read()

    def report(self, streams: int) -> StreamMemory:
        return StreamMemory(
            pid=self.pid,
            streams=streams,
            samples=self.samples,
            rss_before_kib=self.before_kib,
            rss_peak_kib=self.peak_kib,
            rss_after_kib=self.after_kib,
            bytes_per_stream=(self.peak_kib - self.before_kib) * 1024 / max(streams, 1),
        )
