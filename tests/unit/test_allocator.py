"""glibc's mmap threshold, fixed: a large block freed goes back to the system, however many of
its size came before (each in a fresh process: the threshold is the process's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Three blocks of 10 MiB, each written and freed; prints the RSS (KiB) the process kept.
_CHURN = """
import sys
from gateway.allocator import fix_mmap_threshold
fixed = fix_mmap_threshold(None if sys.argv[1] == "none" else int(sys.argv[1]))
def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
base = rss()
for _ in range(3):
    block = b"x" * (10 << 20)
    del block
print(fixed, rss() - base)
"""


def churn(threshold: str) -> tuple[bool, int]:
    out = subprocess.run(
        [sys.executable, "-c", _CHURN, threshold], capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0] == "True", int(out[1])


def glibc() -> bool:
    import ctypes

    return hasattr(ctypes.CDLL(None), "gnu_get_libc_version")


@pytest.mark.skipif(not glibc(), reason="glibc's allocator only")
def test_a_fixed_threshold_gives_large_blocks_back() -> None:
    fixed, kept_kib = churn("none")  # glibc's own moving threshold keeps one of them
    assert not fixed
    assert kept_kib > 8192
    fixed, kept_kib = churn(str(1 << 20))  # (the gateway's default)
    assert fixed
    assert kept_kib < 2048
