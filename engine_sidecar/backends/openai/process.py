"""The engine server as the sidecar's own child (`openai.command`): started with the backend,
restarted with backoff when it exits, its output logged line by line, stopped with the sidecar.

The backoff doubles from `restart_backoff_s` to `restart_backoff_max_s` and starts again from
the beginning once a run has lasted `restart_reset_s`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from engine_sidecar.backends.openai.config import OpenAIConfig
from gateway import tasks

log = logging.getLogger("engine_sidecar.engine_server")

_STOP_GRACE_S = 10.0


class EngineProcess:
    def __init__(self, config: OpenAIConfig) -> None:
        assert config.command
        self._config = config
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name="engine-server")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await tasks.stop(task)  # (its finally ends the process)

    async def _spawn(self) -> asyncio.subprocess.Process:
        c = self._config
        assert c.command
        self.starts += 1
        proc = await asyncio.create_subprocess_exec(
            *c.command,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **c.command_env},
            start_new_session=True,  # (its own process group: stopped as a whole)
        )
        log.info("engine server started (pid %d): %s", proc.pid, " ".join(c.command))
        return proc

    async def _supervise(self) -> None:
        c = self._config
        backoff = c.restart_backoff_s
        loop = asyncio.get_running_loop()
        try:
            while True:
                started = loop.time()
                self._proc = proc = await self._spawn()
                assert proc.stdout is not None
                while line := await proc.stdout.readline():  # ends when the process does
                    log.info("%s", line.decode("utf-8", "replace").rstrip())
                code = await proc.wait()
                if loop.time() - started >= c.restart_reset_s:
                    backoff = c.restart_backoff_s
                log.error("engine server exited (%s); restart in %.1f s", code, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, c.restart_backoff_max_s)
        finally:
            await self._end()

    async def _end(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            async with asyncio.timeout(_STOP_GRACE_S):
                await proc.wait()
        except TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        except ProcessLookupError:
            pass
