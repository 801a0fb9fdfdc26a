"""The fault kinds, which sidecar each one hits (pure), and how to inject and clear them."""

from __future__ import annotations

import enum
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from drill import engine
from drill.cluster import Controls
from drill.engine import FaultSettings, SidecarInfo


class Kind(enum.StrEnum):
    KILL = "kill"  # SIGKILL a standalone sidecar; cleared by starting it again
    STOP = "stop"  # SIGSTOP one (it hangs with its sockets open); cleared by SIGCONT
    HEARTBEAT = "heartbeat"  # SetFaults stop_heartbeats: it streams on, silently
    SLOW = "slow"  # SetFaults slow_token_s: every engine step takes longer
    STALL = "stall"  # SetFaults hang_after_tokens 0: the engine wedges, heartbeats go on
    RANK_KILL = "rank-kill"  # SIGKILL a non-zero rank of a shard group; cleared by a restart
    # SIGKILL the engine server behind an openai-backend sidecar; its sidecar starts it again
    ENGINE_KILL = "engine-kill"


ALL = (
    Kind.KILL,
    Kind.STOP,
    Kind.HEARTBEAT,
    Kind.SLOW,
    Kind.STALL,
    Kind.RANK_KILL,
    Kind.ENGINE_KILL,
)
_STANDALONE = (Kind.KILL, Kind.STOP, Kind.HEARTBEAT, Kind.SLOW, Kind.STALL, Kind.ENGINE_KILL)

DESCRIPTIONS = {
    Kind.KILL: "SIGKILL a standalone sidecar, then start it again",
    Kind.STOP: "SIGSTOP a standalone sidecar (a hang), then SIGCONT",
    Kind.HEARTBEAT: "stop a sidecar's heartbeats while it keeps streaming, then resume them",
    Kind.SLOW: "make a sidecar's engine steps slow, then fast again",
    Kind.STALL: "wedge a sidecar's engine while its heartbeats go on, then unwedge it",
    Kind.RANK_KILL: "SIGKILL the non-zero rank of a shard group, then start it again",
    Kind.ENGINE_KILL: "SIGKILL the engine server behind a sidecar; the sidecar starts it again",
}


def parse_kinds(text: str) -> list[Kind]:
    """`kill,stop` -> [Kind.KILL, Kind.STOP]; `all` -> every kind (ValueError names a bad one)."""
    if text.strip() == "all":
        return list(ALL)
    out = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        try:
            out.append(Kind(word))
        except ValueError:
            known = ", ".join(k.value for k in ALL)
            raise ValueError(f"unknown fault {word!r} (known: {known}, all)") from None
    if not out:
        raise ValueError("no fault given")
    return out


@dataclass(frozen=True, slots=True)
class Fault:
    kind: Kind
    target: SidecarInfo


def _needs_signals(kind: Kind) -> bool:
    return kind in (Kind.KILL, Kind.STOP, Kind.RANK_KILL)


def _needs_restart(kind: Kind) -> bool:
    return kind in (Kind.KILL, Kind.RANK_KILL)


def plan(
    kinds: Sequence[Kind], sidecars: Sequence[SidecarInfo], controls: Controls
) -> tuple[list[Fault], list[str]]:
    """The faults to run, in order, and why any kind was skipped. Faults on standalone sidecars
    take them in turn, so one sidecar is not hit by every fault in a row."""
    faults: list[Fault] = []
    skipped: list[str] = []
    turn = 0
    for kind in kinds:
        candidates = [s for s in sidecars if _fits(kind, s, controls)]
        if kind is Kind.RANK_KILL:
            candidates.sort(key=lambda s: (s.group, s.rank))
            pick = candidates[0] if candidates else None
        else:
            pick = candidates[turn % len(candidates)] if candidates else None
            turn += 1
        if pick is None:
            skipped.append(f"{kind}: {_why_not(kind)}")
            continue
        faults.append(Fault(kind, pick))
    return faults, skipped


def _fits(kind: Kind, s: SidecarInfo, controls: Controls) -> bool:
    if kind is Kind.RANK_KILL:
        if s.standalone or s.rank == 0:
            return False
    elif not s.standalone:
        return False
    if kind is Kind.ENGINE_KILL:
        return controls.can_kill_engine(s.name)
    if _needs_signals(kind) and not controls.can_signal(s.name):
        return False
    return not (_needs_restart(kind) and not controls.can_restart(s.name))


def _why_not(kind: Kind) -> str:
    if kind is Kind.RANK_KILL:
        return "no non-zero rank of a shard group that the drill can kill and restart"
    if kind is Kind.ENGINE_KILL:
        return "no standalone openai-backend sidecar that runs its engine server (openai.command)"
    if _needs_restart(kind):
        return "no standalone sidecar that the drill can kill and restart"
    if _needs_signals(kind):
        return "no standalone sidecar whose process the drill can signal"
    return "no standalone sidecar"


async def inject(fault: Fault, controls: Controls, slow_token_s: float) -> None:
    name, address = fault.target.name, fault.target.address
    match fault.kind:
        case Kind.KILL | Kind.RANK_KILL:
            controls.kill(name)
        case Kind.STOP:
            controls.send(name, signal.SIGSTOP)
        case Kind.HEARTBEAT:
            await engine.set_faults(address, FaultSettings(stop_heartbeats=True))
        case Kind.SLOW:
            await engine.set_faults(address, FaultSettings(slow_token_s=slow_token_s))
        case Kind.STALL:
            await engine.set_faults(address, FaultSettings(hang_after_tokens=0))
        case Kind.ENGINE_KILL:
            controls.kill_engine(name)


async def clear(fault: Fault, controls: Controls) -> None:
    name, address = fault.target.name, fault.target.address
    match fault.kind:
        case Kind.KILL | Kind.RANK_KILL:
            controls.restart(name)
        case Kind.STOP:
            controls.send(name, signal.SIGCONT)
        case Kind.HEARTBEAT | Kind.SLOW | Kind.STALL:
            await engine.set_faults(address, FaultSettings())
        case Kind.ENGINE_KILL:
            pass  # (its sidecar starts the server again, with its backoff)
