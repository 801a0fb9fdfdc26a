"""Fault kinds from the command line, and which sidecar each fault hits."""

from __future__ import annotations

import signal

import pytest

from drill.engine import SidecarInfo
from drill.faults import ALL, Kind, parse_kinds, plan

SIDECARS = [
    SidecarInfo("sim-a", "127.0.0.1:1", "", 0, 1),
    SidecarInfo("sim-b", "127.0.0.1:2", "", 0, 1),
    SidecarInfo("tp-0", "127.0.0.1:4", "tp", 0, 2),
    SidecarInfo("tp-1", "127.0.0.1:5", "tp", 1, 2),
]


class FakeControls:
    def __init__(
        self, signal_ok: set[str], restart_ok: set[str], engine_ok: frozenset[str] = frozenset()
    ) -> None:
        self.signal_ok = signal_ok
        self.restart_ok = restart_ok
        self.engine_ok = engine_ok

    def can_signal(self, name: str) -> bool:
        return name in self.signal_ok

    def can_restart(self, name: str) -> bool:
        return name in self.restart_ok

    def send(self, name: str, sig: signal.Signals) -> None:
        raise AssertionError("planning sends nothing")

    def kill(self, name: str) -> None:
        raise AssertionError("planning kills nothing")

    def restart(self, name: str) -> None:
        raise AssertionError("planning starts nothing")

    def can_kill_engine(self, name: str) -> bool:
        return name in self.engine_ok

    def kill_engine(self, name: str) -> None:
        raise AssertionError("planning kills nothing")

    def release(self) -> None:
        pass


LOCAL = FakeControls({s.name for s in SIDECARS}, {s.name for s in SIDECARS})
ATTACHED = FakeControls({"sim-a", "sim-b", "tp-1"}, set())


def test_parse_kinds() -> None:
    assert parse_kinds("all") == list(ALL)
    assert parse_kinds("kill, heartbeat,") == [Kind.KILL, Kind.HEARTBEAT]
    assert parse_kinds("rank-kill") == [Kind.RANK_KILL]
    assert parse_kinds("stall") == [Kind.STALL]
    with pytest.raises(ValueError, match="unknown fault 'boom'"):
        parse_kinds("kill,boom")
    with pytest.raises(ValueError, match="no fault"):
        parse_kinds(" , ")


def test_standalone_faults_take_the_standalone_sidecars_in_turn() -> None:
    faults, skipped = plan(list(ALL), SIDECARS, LOCAL)
    assert [(f.kind, f.target.name) for f in faults] == [
        (Kind.KILL, "sim-a"),
        (Kind.STOP, "sim-b"),
        (Kind.HEARTBEAT, "sim-a"),
        (Kind.SLOW, "sim-b"),
        (Kind.STALL, "sim-a"),
        (Kind.RANK_KILL, "tp-1"),
    ]
    assert skipped == [
        "engine-kill: no standalone openai-backend sidecar that runs its engine server "
        "(openai.command)"
    ]


def test_engine_kill_takes_a_sidecar_whose_engine_server_it_can_kill() -> None:
    names = {s.name for s in SIDECARS}
    controls = FakeControls(names, names, frozenset({"sim-b", "tp-0"}))
    faults, skipped = plan([Kind.ENGINE_KILL, Kind.ENGINE_KILL], SIDECARS, controls)
    # Standalone ones only (a shard group's engine is not one server), in turn.
    assert [(f.kind, f.target.name) for f in faults] == [
        (Kind.ENGINE_KILL, "sim-b"),
        (Kind.ENGINE_KILL, "sim-b"),
    ]
    assert skipped == []
    # Attached: never (nothing known would start the server again).
    assert plan([Kind.ENGINE_KILL], SIDECARS, ATTACHED)[0] == []


def test_rank_kill_takes_a_non_zero_rank_never_rank_0() -> None:
    sidecars = [*SIDECARS, SidecarInfo("tp-2", "127.0.0.1:6", "tp", 2, 3)]
    faults, _ = plan([Kind.RANK_KILL], sidecars, LOCAL)
    assert [f.target.name for f in faults] == ["tp-1"]


def test_attached_drills_skip_what_needs_a_restart() -> None:
    faults, skipped = plan(list(ALL), SIDECARS, ATTACHED)
    assert [(f.kind, f.target.name) for f in faults] == [
        (Kind.STOP, "sim-b"),
        (Kind.HEARTBEAT, "sim-a"),
        (Kind.SLOW, "sim-b"),
        (Kind.STALL, "sim-a"),
    ]
    assert [s.split(":")[0] for s in skipped] == ["kill", "rank-kill", "engine-kill"]


def test_stop_needs_a_process_to_signal() -> None:
    faults, skipped = plan([Kind.STOP, Kind.HEARTBEAT], SIDECARS, FakeControls(set(), set()))
    assert [f.kind for f in faults] == [Kind.HEARTBEAT]
    assert skipped == ["stop: no standalone sidecar whose process the drill can signal"]


def test_a_cluster_of_one_group_only_has_rank_faults() -> None:
    faults, skipped = plan(list(ALL), SIDECARS[2:], LOCAL)
    assert [f.kind for f in faults] == [Kind.RANK_KILL]
    assert len(skipped) == 6
