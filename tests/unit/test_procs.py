"""A child started with `child_env` gets its signal when its parent dies, asked for by the
child itself (no code runs between fork and exec)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from gateway.procs import ENV, child_env
from tests.integration.poll import until

ROOT = Path(__file__).resolve().parents[2]
CHILD = (
    "import os, sys; from gateway.procs import ENV, die_with_parent; die_with_parent(); "
    "print(os.environ.get(ENV), flush=True); sys.stdin.read()"
)
MIDDLE = (
    "import subprocess, sys; from gateway.procs import child_env; "
    f"p = subprocess.Popen([sys.executable, '-c', {CHILD!r}], env=child_env()); "
    "print(p.pid, flush=True); p.wait()"
)


def gone(pid: int) -> bool:
    """Exited (a zombie no one has reaped yet counts: it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def test_a_child_dies_with_its_parent() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", MIDDLE],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as middle:
        assert middle.stdout is not None
        child = int(middle.stdout.readline())
        assert middle.stdout.readline() == b"None\n"  # asked, and not passed on
        assert not gone(child)
        middle.kill()
        middle.wait(10)
        until(lambda: gone(child), 10.0, f"the child {child} ends with its parent")


def test_a_child_whose_parent_died_before_it_asked_ends_at_once() -> None:
    env = {**child_env(signal.SIGTERM), "PYTHONPATH": str(ROOT)}
    env[ENV] = f"{os.getpid() + 1_000_000}:{int(signal.SIGTERM)}"  # not its parent
    done = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=env, stdin=subprocess.DEVNULL, timeout=30
    )
    assert done.returncode == -signal.SIGTERM


def test_without_the_ask_nothing_changes() -> None:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout) == (0, b"None\n")
