"""A real PostgreSQL server for the tests (Debian's package), on a free loopback port, in a
data directory of its own that goes with it, with trust auth and no fsync.

Run as the `postgres` user when the tests run as root (PostgreSQL refuses root). Skipped where
PostgreSQL is not installed, unless SHARDGATE_REQUIRE_ENGINES=1 (set by `make test`, which
installs the package) makes that a failure instead.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.ports import free_port

USER = "shardgate"


def _bindir() -> Path | None:
    found = shutil.which("initdb")
    if found is not None:
        return Path(os.path.realpath(found)).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    return Path(dirs[-1]) if dirs else None


def _as_postgres() -> tuple[Callable[[], None] | None, int | None]:
    """What a child needs to run as `postgres` (under root), and that user's id."""
    if os.geteuid() != 0:
        return None, None
    pw = pwd.getpwnam("postgres")

    def demote() -> None:
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)

    return demote, pw.pw_uid


class PostgresServer:
    def __init__(self) -> None:
        bindir = _bindir()
        if bindir is None:
            message = "PostgreSQL is not installed (apt-get install postgresql)"
            if os.environ.get("SHARDGATE_REQUIRE_ENGINES") == "1":
                pytest.fail(message)
            pytest.skip(message)
        self._bin = bindir
        self.port = free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="shardgate-pg-"))
        self._proc: subprocess.Popen[bytes] | None = None
        self._databases = 0

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def start(self, timeout_s: float = 30.0) -> None:
        demote, uid = _as_postgres()
        if uid is not None:
            os.chown(self._dir, uid, -1)
        data = self._dir / "data"
        subprocess.run(
            [self._bin / "initdb", "-D", data, "-U", USER, "--auth=trust", "-E", "UTF8"],
            check=True,
            stdout=subprocess.DEVNULL,
            preexec_fn=demote,
        )
        args = [self._bin / "postgres", "-D", data, "-p", str(self.port), "-k", self._dir]
        args += ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200"]
        self._proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=demote,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                psycopg.connect(self.url(), connect_timeout=1).close()
                return
            except psycopg.OperationalError:
                if self._proc.poll() is not None:
                    raise RuntimeError(f"postgres exited with {self._proc.returncode}") from None
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"postgres did not answer within {timeout_s} s") from None
                time.sleep(0.05)

    def database(self) -> str:
        """The URL of a new, empty database."""
        self._databases += 1
        name = f"db{self._databases}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(30)
            self._proc = None
        shutil.rmtree(self._dir, ignore_errors=True)
