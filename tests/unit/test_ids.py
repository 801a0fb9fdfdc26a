"""Request ids: the format clients see, unique within a process and across forked children."""

from __future__ import annotations

import os
import re

from gateway.ids import new_request_id


def test_ids_are_32_hex_digits_and_distinct() -> None:
    ids = [new_request_id() for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_child_draws_its_own_prefix() -> None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one id and leave at once
        os.write(w, new_request_id().encode())
        os._exit(0)
    os.close(w)
    child = os.read(r, 64).decode()
    os.close(r)
    os.waitpid(pid, 0)
    mine = new_request_id()
    assert len(child) == 32
    assert child[:16] != mine[:16]
