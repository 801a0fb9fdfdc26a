"""Replicas from the sidecars' announcements."""

from __future__ import annotations

from drill.engine import SidecarInfo
from drill.topology import head_of, replica_count

A = SidecarInfo("sim-a", "127.0.0.1:1", "", 0, 1)
B = SidecarInfo("sim-b", "127.0.0.1:2", "", 0, 1)
T0 = SidecarInfo("tp-0", "127.0.0.1:4", "tp", 0, 2)
T1 = SidecarInfo("tp-1", "127.0.0.1:5", "tp", 1, 2)


def test_a_group_is_one_replica() -> None:
    assert replica_count([A, B, T0, T1]) == 3
    assert replica_count([A]) == 1
    assert replica_count([]) == 0


def test_a_group_without_rank_0_is_no_replica() -> None:
    assert replica_count([A, T1]) == 1


def test_the_head_of_a_rank_is_its_group_s_rank_0() -> None:
    assert head_of(T1, [A, B, T0, T1]) == T0.address
    assert head_of(T0, [A, B, T0, T1]) == T0.address
    assert head_of(A, [A, B, T0, T1]) == A.address
    assert head_of(T1, [A, T1]) == T1.address
