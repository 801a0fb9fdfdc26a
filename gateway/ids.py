"""Request ids: 32 hex digits, unique across processes, without a system call each.

A random 64-bit prefix per process (drawn again in a forked child) followed by a counter.
`uuid.uuid4()` reads the system's random source on every call, which costs more than the rest
of the id's handling on the request path.
"""

from __future__ import annotations

import itertools
import os

_prefix = ""
_counter = itertools.count()


def _reset() -> None:
    global _prefix, _counter
    _prefix = os.urandom(8).hex()
    _counter = itertools.count(int.from_bytes(os.urandom(4), "big"))


def new_request_id() -> str:
    return f"{_prefix}{next(_counter) & 0xFFFFFFFFFFFFFFFF:016x}"


_reset()
os.register_at_fork(after_in_child=_reset)
