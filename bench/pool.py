"""Keep-alive connections to one HTTP server: an idle list, at most one request each."""

from __future__ import annotations

from bench.http1 import Http1Connection, connect


class Pool:
    def __init__(self, host: str, port: int, connect_timeout_s: float, max_idle: int) -> None:
        self.host = host
        self.port = port
        self._timeout = connect_timeout_s
        self._max_idle = max_idle
        self._idle: list[Http1Connection] = []
        self.opened = 0

    async def acquire(self) -> Http1Connection:
        while self._idle:
            conn = self._idle.pop()
            if conn.reusable:
                return conn
        conn = await connect(self.host, self.port, self._timeout)
        self.opened += 1
        return conn

    def release(self, conn: Http1Connection) -> None:
        if conn.reusable and len(self._idle) < self._max_idle:
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()
