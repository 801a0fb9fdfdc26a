"""The sidecars, their health, and the replicas assembled from what they announce.

Each link reports connect, heartbeat (load report) and loss. Heartbeats feed a monitor per
sidecar (UP, SUSPECT after missed intervals, DOWN); on any change of who is up, the replicas are
assembled again from the announcements (a shard group is one replica, routable only while every
rank is alive), and a replica that broke has its in-flight requests evacuated: they migrate.
A live sidecar whose engine holds work and makes no progress (policy/progress.py) counts as a
SUSPECT rank while it lasts, and its replica is offered to `on_stalled` on each round: the
supervisor ejects it if the pool's ejection cap allows, and then its requests migrate. One the
cap keeps stays routable, and its requests wait for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from gateway import tasks
from gateway.config.routing import HealthSettings
from gateway.config.schema import LinkSettings, SidecarEndpoint
from gateway.observability.labels import ReplicaState
from gateway.policy.health import Health, HeartbeatMonitor, heartbeat_interval_s
from gateway.policy.progress import StallDetector
from gateway.policy.routing.replicas import Assembly, assemble, broken_since
from gateway.policy.routing.snapshot import EndpointSnapshot, Replica
from gateway.runtime.events import EventQueue, LinkBeat, LinkDown, LinkUp
from gateway.runtime.kv_feed import KvFeed
from gateway.types import Unavailable
from gateway.upstream.link import EngineLink

log = logging.getLogger(__name__)

_TICK_S = 0.1


class Fleet:
    def __init__(
        self,
        endpoints: Iterable[SidecarEndpoint],
        settings: LinkSettings,
        health: HealthSettings | None = None,
        events: EventQueue | None = None,
    ) -> None:
        self.health = health or HealthSettings()
        # What the links tell arrives as events, handled in order with the requests' own.
        self.events = events if events is not None else EventQueue()
        self.events.register(LinkUp, self._on_up)
        self.events.register(LinkBeat, self._on_beat)
        self.events.register(LinkDown, self._on_down)
        self.links: list[EngineLink] = []
        self.by_name: dict[str, EngineLink] = {}
        self.draining: list[EngineLink] = []
        self.monitors: dict[str, HeartbeatMonitor] = {}
        self.assembly: Assembly = assemble(())
        # Every model announced so far -> its max_model_len (kept while its replicas are down).
        self.seen_models: dict[str, int] = {}
        # Every model announced so far -> the optional sampling fields all its engines honour.
        self.capabilities: dict[str, frozenset[str]] = {}
        # Every LoRA adapter in the latest announcement of a sidecar (down ones included) -> the
        # model it adapts (its `parent`); an adapter unloaded everywhere is gone from it.
        self.adapters: dict[str, str] = {}
        self.on_change: Callable[[], None] | None = None  # capacity may have changed
        h = self.health
        self.stalls = StallDetector(
            h.stall_timeout_s, h.stall_startup_grace_s, h.stall_step_multiplier
        )
        self.stalled: frozenset[str] = frozenset()  # sidecars whose engine stalled
        # A replica's engine stalled: True when that ejected it now (its requests then migrate).
        self.on_stalled: Callable[[str], bool] | None = None
        self._states: dict[str, Health] = {}
        self._ready: dict[str, bool] = {}  # each link's `load.ready` as last assembled
        self._task: asyncio.Task[None] | None = None
        self._drains: set[asyncio.Task[None]] = set()
        self.kv = KvFeed()  # what the engines report they cache (KV events), as links tell it
        for e in endpoints:
            self._add(EngineLink(e.name, e.address, settings))

    def _add(self, link: EngineLink) -> None:
        link.listener = self
        link.kv = self.kv
        self.links.append(link)
        self.by_name[link.name] = link

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        for link in self.links:
            link.start()
        self._task = asyncio.create_task(self._tick(), name="fleet")

    async def close(self) -> None:
        for t in [t for t in (self._task, *self._drains) if t is not None]:
            await tasks.stop(t)
        await asyncio.gather(*(link.close() for link in (*self.links, *self.draining)))
        await self.kv.close()

    async def wait_connected(self, timeout_s: float) -> bool:
        done = await asyncio.gather(*(link.wait_connected(timeout_s) for link in self.links))
        return all(done)

    def update(
        self,
        endpoints: Iterable[SidecarEndpoint],
        settings: LinkSettings,
        health: HealthSettings,
        drain_timeout_s: float,
    ) -> None:
        """A config reload: connect new sidecars; drain removed ones (no new requests; in-flight
        ones finish, or migrate once `drain_timeout_s` has passed)."""
        self.health = health
        self.stalls.configure(
            health.stall_timeout_s, health.stall_startup_grace_s, health.stall_step_multiplier
        )
        wanted = {e.name: e for e in endpoints}
        for link in list(self.links):
            e = wanted.get(link.name)
            if e is not None and e.address == link.address:
                link.settings = settings
                continue
            self.links.remove(link)
            del self.by_name[link.name]
            self.kv.forget(link)
            self.monitors.pop(link.name, None)
            self.stalls.forget(link.name)
            self.draining.append(link)
            task = asyncio.create_task(
                self._drain(link, drain_timeout_s), name=f"drain-{link.name}"
            )
            self._drains.add(task)
            task.add_done_callback(self._drains.discard)
            log.info("sidecar %s removed from the config: draining", link.name)
        for name, e in wanted.items():
            if name not in self.by_name:
                link = EngineLink(e.name, e.address, settings)
                self._add(link)
                link.start()
                log.info("sidecar %s added: connecting to %s", name, e.address)
        for name, monitor in self.monitors.items():
            link = self.by_name[name]
            if link.info is not None:
                monitor.configure(
                    health, heartbeat_interval_s(health, link.info.heartbeat_interval_s)
                )
        self.refresh()

    async def _drain(self, link: EngineLink, timeout_s: float) -> None:
        link.listener = None
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    if not link.streams:
                        break
                    await asyncio.sleep(0.05)
        except TimeoutError:
            self.evacuate(link, f"sidecar {link.name} left the config")
        finally:
            self.draining.remove(link)
            await link.close()

    # -- what the links tell (from their readers: posted, handled as events) ---------------------
    def link_up(self, link: EngineLink) -> None:
        self.events.post(LinkUp(link))

    def link_beat(self, link: EngineLink) -> None:
        self.events.post(LinkBeat(link))

    def link_down(self, link: EngineLink) -> None:
        self.events.post(LinkDown(link))

    def _on_up(self, ev: LinkUp) -> None:
        link = ev.link
        if link.info is None or self.by_name.get(link.name) is not link:
            return  # a link removed from the config since
        assert link.info is not None
        interval = heartbeat_interval_s(self.health, link.info.heartbeat_interval_s)
        monitor = self.monitors.get(link.name)
        if monitor is None:
            monitor = self.monitors[link.name] = HeartbeatMonitor(self.health, interval)
        else:
            monitor.configure(self.health, interval)
        monitor.beat(link.last_heartbeat)
        self.refresh()

    def _on_beat(self, ev: LinkBeat) -> None:
        link = ev.link
        monitor = self.monitors.get(link.name)
        if monitor is not None and self.by_name.get(link.name) is link:
            monitor.beat(link.last_heartbeat)
            ready = link.load is not None and link.load.ready
            # (an engine that stopped or started taking requests: routable no more, or again)
            if self._states.get(link.name) is not Health.UP or self._ready.get(link.name) != ready:
                self.refresh()

    def _on_down(self, ev: LinkDown) -> None:
        link = ev.link
        if self.by_name.get(link.name) is not link:
            return
        monitor = self.monitors.get(link.name)
        if monitor is not None:
            monitor.lost()
        self.refresh()

    # -- assembly ----------------------------------------------------------------------------
    def _note_activity(self) -> None:
        for link in self.links:
            monitor = self.monitors.get(link.name)
            if monitor is not None and link.last_activity:
                monitor.activity(link.last_activity)

    def refresh(self) -> None:
        """Assemble the replicas again; evacuate the requests of replicas that broke."""
        self._note_activity()
        now = time.monotonic()
        snapshots = []
        states = {}
        for link in self.links:
            monitor = self.monitors.get(link.name)
            health = Health.DOWN
            if link.connected and monitor is not None:
                health = monitor.state(now)
            states[link.name] = health
            snapshots.append(
                EndpointSnapshot(
                    link.name,
                    link.address,
                    link.info,
                    link.load,
                    health,
                    link.inflight,
                    link.name in self.stalled,
                )
            )
        old, self.assembly = self.assembly, assemble(snapshots)
        self._states = states
        self._ready = {link.name: link.load is not None and link.load.ready for link in self.links}
        for model, replicas in self.assembly.pools.items():
            self.seen_models[model] = max(r.models.get(model, 0) for r in replicas)
        caps: dict[str, frozenset[str]] = {}
        adapters: dict[str, str] = {}
        for link in self.links:
            if link.info is not None:
                for model, loras in link.info.loras.items():
                    for lora in loras:
                        adapters.setdefault(lora, model)
                if link.info.rank != 0:
                    continue  # a shard group's other ranks run no requests: its head says
                for model in link.info.models:
                    have = caps.get(model)
                    mine = link.info.capabilities
                    caps[model] = mine if have is None else have & mine
        self.capabilities.update(caps)
        self.adapters = adapters
        for replica in broken_since(old, self.assembly):
            head = self.by_name.get(replica.head)
            if head is not None and head.streams:
                log.warning("replica %s broke: moving %d requests", replica.name, head.inflight)
                self.evacuate(head, f"replica {replica.name} lost a rank or its heartbeat")
        if self.on_change is not None:
            self.on_change()

    @staticmethod
    def evacuate(link: EngineLink, why: str) -> None:
        """Stop every request on the link; each one's owner resumes it elsewhere."""
        for key, target in list(link.streams.items()):
            link.abort(key)
            target.fail(Unavailable(why))

    async def _tick(self) -> None:
        """Missed heartbeats turn sidecars SUSPECT, then DOWN, with no event to say so.

        When the tick itself comes late, the gateway was stalled (paused, or its loop saturated)
        and heartbeats may sit unread behind it: that much silence is forgiven, so a stall of
        the gateway never takes healthy sidecars down."""
        expected = time.monotonic() + _TICK_S
        while True:
            await asyncio.sleep(_TICK_S)
            now = time.monotonic()
            lag = now - expected
            expected = now + _TICK_S
            try:
                self._check(now, lag)
            except Exception:  # one bad round must not end health checking for good
                log.exception("fleet health check failed")

    def _check(self, now: float, lag: float) -> None:
        if lag > _TICK_S:
            for stalled in self.monitors.values():
                stalled.forgive(lag)
            self.stalls.forgive(lag)
        self._note_activity()
        if self._judge_progress(now):
            return
        for link in self.links:
            monitor = self.monitors.get(link.name)
            if monitor is None or not link.connected:
                continue
            if monitor.state(now) is not self._states.get(link.name):
                self.refresh()
                break

    def _judge_progress(self, now: float) -> bool:
        """Which sidecars' engines hold work and make no progress (True when that changed: a
        stalled rank is SUSPECT); each stalled replica is offered to `on_stalled`, and one it
        ejects has its requests migrate. Only sidecars with current heartbeats (UP) are judged:
        a stale report's work held says nothing, and the heartbeat monitor has the others."""
        stalled = set()
        for link in self.links:
            load = link.load
            if not link.connected or load is None:
                self.stalls.forget(link.name)
                continue
            if self._states.get(link.name) is not Health.UP:
                self.stalls.pause(link.name)
                continue
            work = max(load.held, link.inflight)
            if self.stalls.observe(link.name, now, load.steps, work, link.last_activity):
                stalled.add(link.name)
        changed = stalled != self.stalled
        if changed:
            for name in stalled - self.stalled:
                log.warning(
                    "sidecar %s: its engine holds work and made no progress for %g s",
                    name,
                    self.stalls.timeout_for(name, now),
                )
            self.stalled = frozenset(stalled)
            self.refresh()
        if stalled and self.on_stalled is not None:
            for replica in self.assembly.replicas:
                if stalled.isdisjoint(replica.members) or not self.on_stalled(replica.name):
                    continue
                head = self.by_name.get(replica.head)  # ejected (the supervisor logs it)
                if head is not None and head.streams:
                    self.evacuate(head, f"replica {replica.name} stalled")
        return changed

    # -- what routing and the scheduler read ---------------------------------------------------
    def pool(self, model: str) -> tuple[Replica, ...]:
        """The replicas serving `model`, their live figures refreshed from the links."""
        replicas = self.assembly.pool(model)
        for r in replicas:
            head = self.by_name.get(r.head)
            if head is None:
                continue
            r.inflight = head.inflight
            load = head.load
            if load is not None:
                r.running, r.waiting, r.kv_usage = load.running, load.waiting, load.kv_usage
        return replicas

    def live(self, model: str) -> frozenset[str]:
        """The names of the routable replicas serving `model`, ejected or not: the pool the
        ejection cap counts (a DOWN replica is out already, and no ejection)."""
        return frozenset(r.name for r in self.assembly.pool(model) if r.routable)

    def capacity(self, model: str) -> int:
        """Slots of the routable replicas serving `model`."""
        return sum(r.max_num_seqs for r in self.assembly.pool(model) if r.routable)

    def adapter_of(self, name: str) -> tuple[str, str]:
        """(model, LoRA adapter) that a request's model name means: an adapter's name means
        its parent and itself; any other name, itself and no adapter."""
        parent = self.adapters.get(name)
        if parent is not None and name not in self.seen_models:
            return parent, name
        return name, ""

    def knows(self, model: str) -> bool:
        return model in self.seen_models or model in self.adapters

    def models(self) -> dict[str, tuple[int, int]]:
        """Every model announced so far -> (max_model_len, routable replicas)."""
        pools = self.assembly.pools
        return {
            m: (max_len, sum(1 for r in pools.get(m, ()) if r.routable))
            for m, max_len in self.seen_models.items()
        }

    def replica_states(self, ejected: Callable[[str], bool]) -> dict[str, ReplicaState]:
        """Each sidecar's state as the metrics show it (by address); `ejected(replica name)`."""
        names = {m: r.name for r in self.assembly.replicas for m in r.members}
        out = {}
        for link in self.links:
            health = self._states.get(link.name, Health.DOWN)
            replica = names.get(link.name)
            if replica is not None and ejected(replica):
                out[link.address] = ReplicaState.EJECTED
            elif health is Health.DOWN or link.name in self.stalled:
                out[link.address] = ReplicaState.DOWN
            elif health is Health.SUSPECT:
                out[link.address] = ReplicaState.SUSPECT
            else:
                out[link.address] = ReplicaState.UP
        return out
