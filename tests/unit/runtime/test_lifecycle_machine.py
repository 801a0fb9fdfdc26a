"""The runtime under random interleavings of everything that can happen to requests: arrivals of
several classes (queueing, preemption), engine steps, engine errors, links that go down and come
back, clients that leave, queue timeouts, and events handled at random moments.

The real scheduler, supervisor, fleet and links (their sessions replaced by a fake engine that
reads what the links would send); after every step:
- no request is settled (its `on_done`) more than once, and none that is still live is;
- every token a client received continues its stream: none lost, none repeated;
- an engine never runs a request that has ended, and runs each live one at most once.
At the end, once every client has left: every admitted request ended exactly once, its charge
settled exactly once, its engine request finished or aborted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1.params import PROTOCOL_VERSION
from shardgate.v1.wire import WireDelta

from gateway.config.routing import HealthSettings, RetrySettings, RoutingSettings
from gateway.config.schema import LinkSettings, SidecarEndpoint
from gateway.config.tenants import PreemptionConfig, QueueBounds, SchedulingConfig
from gateway.runtime.events import EventQueue
from gateway.runtime.fleet import Fleet
from gateway.runtime.job import Job
from gateway.runtime.lifecycle import TERMINAL, State
from gateway.runtime.scheduler import Scheduler
from gateway.runtime.stream import ResponseStream
from gateway.runtime.supervisor import Supervisor
from gateway.types import Finish, GatewayError, GenerationRequest, Sampling

MODEL = "m"
SLOTS = 2  # per sidecar


def token(rid: str, i: int) -> int:
    """The engine's i-th token of a request: deterministic, so a resume continues it."""
    return (sum(map(ord, rid)) * 31 + i * 7) % 1000


@dataclass
class Run:
    rid: str
    pos: int
    max_tokens: int


@dataclass
class Engine:
    """What a sidecar's engine does with the link's submits and aborts."""

    runs: dict[int, Run] = field(default_factory=dict)

    def take(self, link: object) -> None:
        out = link.take_outgoing()  # type: ignore[attr-defined]
        if out is None:
            return
        submits, aborts = out
        for req, key, resume in submits:
            self.runs[key] = Run(req.request_id, len(resume), req.sampling.max_tokens)
        for key in aborts:
            self.runs.pop(key, None)


class Timers:
    """The scheduler's timer, fired by the test."""

    def __init__(self) -> None:
        self.due: list[tuple[float, object]] = []

    def call_later(self, delay: float, fn: object) -> Timers.Handle:
        h = Timers.Handle(self, fn)
        self.due.append((delay, h))
        return h

    class Handle:
        def __init__(self, owner: Timers, fn: object) -> None:
            self.owner, self.fn, self.cancelled = owner, fn, False

        def cancel(self) -> None:
            self.cancelled = True

    def fire(self) -> None:
        due, self.due = self.due, []
        for _, h in due:
            if isinstance(h, Timers.Handle) and not h.cancelled:
                h.fn()  # type: ignore[operator]


def info(name: str) -> pb.InfoReply:
    return pb.InfoReply(
        sidecar_id=name,
        backend="fake",
        models=[pb.ModelCard(name=MODEL, max_model_len=4096)],
        world_size=1,
        max_num_seqs=SLOTS,
        heartbeat_interval_s=1000.0,
        load=pb.LoadReport(seq=1, max_num_seqs=SLOTS, ready=True),
        protocol_version=PROTOCOL_VERSION,
    )


class Runtime(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0
        self.events = EventQueue(schedule=lambda fn: None)  # drained by the `drain` rule
        endpoints = [SidecarEndpoint(name=f"s{i}", address=f"127.0.0.1:{9000 + i}") for i in (0, 1)]
        self.fleet = Fleet(endpoints, LinkSettings(), HealthSettings(), self.events)
        retry = RetrySettings(budget_ratio=10.0, min_retries_per_s=1000.0)
        self.supervisor = Supervisor(
            self.fleet, RoutingSettings(seed=0), retry, clock=lambda: self.now
        )
        self.timers = Timers()
        scheduling = SchedulingConfig(
            default=QueueBounds(max_depth=6, max_wait_s=5.0),
            preemption=PreemptionConfig(min_run_s=0.0, max_per_request=2),
        )
        self.done: dict[Job, int] = {}
        self.scheduler = Scheduler(
            self.fleet,
            self.supervisor,
            scheduling,
            {},
            self.events,
            on_done=self._settled,
            clock=lambda: self.now,
            call_later=self.timers.call_later,
        )
        self.fleet.on_change = self.scheduler.capacity_changed
        self.engines = {link.name: Engine() for link in self.fleet.links}
        self.jobs: list[Job] = []
        self.seen: dict[Job, list[int]] = {}
        self.n = 0
        for link in self.fleet.links:
            self._up(link)
        self.events.drain()

    # -- helpers -------------------------------------------------------------------------
    def _settled(self, job: Job) -> None:
        self.done[job] = self.done.get(job, 0) + 1

    def _up(self, link: object) -> None:
        i = info(link.name)  # type: ignore[attr-defined]
        link.announced(i, i.load)  # type: ignore[attr-defined]

    def _live(self) -> list[Job]:
        return [j for j in self.jobs if j.state not in TERMINAL]

    def _read_client(self) -> None:
        for j in self.jobs:
            got = self.seen.setdefault(j, [])
            for d in j.out.pending:
                got.extend(d.token_ids)
            j.out.pending = []

    # -- rules ---------------------------------------------------------------------------
    @rule(
        priority=st.sampled_from([-1, 0, 5]),
        max_tokens=st.integers(1, 5),
        pinned=st.booleans(),
    )
    def arrive(self, priority: int, max_tokens: int, pinned: bool) -> None:
        """`pinned`: a request that cannot resume exactly (presence_penalty)."""
        self.n += 1
        sampling = Sampling(max_tokens=max_tokens, presence_penalty=0.5 if pinned else 0.0)
        req = GenerationRequest(f"r{self.n}", MODEL, sampling, prompt="p")
        req.priority = priority
        j = Job(req, self.events, ResponseStream(64), priority=priority, arrival=self.now)
        try:
            self.scheduler.enqueue(j, 10.0, 1.0)
        except GatewayError:
            if j.state in TERMINAL:
                self.done.pop(j, None)  # refused at the door: settled by the caller
            return
        self.jobs.append(j)

    @rule(which=st.integers(0, 1))
    def engine_step(self, which: int) -> None:
        link = self.fleet.links[which]
        engine = self.engines[link.name]
        engine.take(link)
        deltas = []
        for key, run in list(engine.runs.items()):
            if key not in link.streams:
                continue
            tok = token(run.rid, run.pos)
            run.pos += 1
            if run.pos >= run.max_tokens:
                del engine.runs[key]
                deltas.append(WireDelta(key, [tok], "x", int(Finish.LENGTH), 1, 0, run.max_tokens))
            else:
                deltas.append(WireDelta(key, [tok], "x", 0, 1 if run.pos == 1 else 0))
        link.deliver(deltas)
        self._read_client()

    @rule(which=st.integers(0, 1), data=st.data())
    def engine_error(self, which: int, data: st.DataObject) -> None:
        link = self.fleet.links[which]
        engine = self.engines[link.name]
        engine.take(link)
        keys = sorted(k for k in engine.runs if k in link.streams)
        if not keys:
            return
        key = data.draw(st.sampled_from(keys))
        del engine.runs[key]
        link.deliver([WireDelta(key, [], "", pb.FINISH_ERROR, error_code=pb.ERROR_INTERNAL)])

    @rule(which=st.integers(0, 1))
    def link_down(self, which: int) -> None:
        link = self.fleet.links[which]
        if link.connected:
            link._lost("the test cut it")
            self.engines[link.name].runs.clear()  # the sidecar drops what it ran for it

    @rule(which=st.integers(0, 1))
    def link_up(self, which: int) -> None:
        link = self.fleet.links[which]
        if not link.connected:
            self._up(link)

    @precondition(lambda self: bool(self._live()))
    @rule(data=st.data())
    def client_leaves(self, data: st.DataObject) -> None:
        j = data.draw(st.sampled_from(self._live()))
        j.close()

    @rule(seconds=st.sampled_from([0.5, 6.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.timers.fire()

    @rule()
    def drain(self) -> None:
        self.events.drain()
        self._read_client()

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def settled_at_most_once_and_only_when_ended(self) -> None:
        for j in self.jobs:
            count = self.done.get(j, 0)
            assert count <= 1, f"{j.request.request_id} settled {count} times"
            if count:
                assert j.state in TERMINAL

    @invariant()
    def clients_see_each_token_once_in_order(self) -> None:
        for j, got in self.seen.items():
            want = [token(j.request.request_id, i) for i in range(len(got))]
            assert got == want, f"{j.request.request_id}: {got} != {want}"
            assert j.generated[: len(got)].tolist() == got

    @invariant()
    def what_cannot_resume_is_never_preempted_or_moved_after_a_token(self) -> None:
        for j in self.jobs:
            if j.pinned:
                assert j.preemptions == 0 and j.migrations == 0, j.request.request_id

    @invariant()
    def each_pool_knows_the_lowest_class_it_runs(self) -> None:
        for pool in self.scheduler.pools.values():
            classes = [j.priority for j in pool.running]
            assert pool.running.lowest() == (min(classes) if classes else None)

    @invariant()
    def engines_run_only_live_requests_once(self) -> None:
        for link in self.fleet.links:
            owners = [t for t in link.streams.values()]
            assert len(owners) == len(set(map(id, owners))), "a request runs twice on a link"
            for t in owners:
                assert isinstance(t, Job) and t.state in (State.PLACED, State.STREAMING), (
                    f"{t.request.request_id} on {link.name} in {t.state.name}"  # type: ignore[attr-defined]
                )
        placed = [j for j in self.jobs if j.link is not None]
        assert len(placed) == len(set(placed))

    def everything_ends(self) -> None:
        """The end of a run: every client leaves; all is settled."""
        self.events.drain()
        for j in self._live():
            j.close()
        self.events.drain()
        self._read_client()
        for j in self.jobs:
            assert j.state in TERMINAL, f"{j.request.request_id} left in {j.state.name}"
            assert self.done.get(j) == 1, f"{j.request.request_id} settled {self.done.get(j)}"
            if j.state is State.DONE:
                got = self.seen.get(j, [])
                assert len(got) == j.request.sampling.max_tokens
        for link in self.fleet.links:
            assert not link.streams
            self.engines[link.name].take(link)
            live_rids = {j.request.request_id for j in self._live()}
            assert not [r for r in self.engines[link.name].runs.values() if r.rid in live_rids]
        for pool in self.scheduler.pools.values():
            assert not pool.running and not pool.queue


class RuntimeToTheEnd(Runtime):
    def teardown(self) -> None:
        self.everything_ends()


RuntimeToTheEnd.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
test_runtime = RuntimeToTheEnd.TestCase


def test_a_full_pool_of_one_class_looks_at_no_running_job_for_a_waiter_of_that_class() -> None:
    """Whether any running job is of a lower class is counted: a full pool (every request
    at one class, the default) does not walk its running jobs for each new one."""
    rt = Runtime()
    looked: list[int] = []
    policy = rt.scheduler._preemption

    class Counted:
        def choose(self, priority: int, running: Iterable[Job], now: float) -> object:
            seen = list(running)
            looked.append(len(seen))
            return policy.choose(priority, seen, now)

    rt.scheduler._preemption = Counted()  # type: ignore[assignment]
    for _ in range(2 * SLOTS + 3):  # both engines full, three waiting
        rt.arrive(priority=0, max_tokens=5, pinned=False)
    assert sum(len(p.running) for p in rt.scheduler.pools.values()) == 2 * SLOTS
    assert looked == []
    rt.arrive(priority=5, max_tokens=5, pinned=False)  # a higher class: one is preempted
    assert looked and looked[0] == 2 * SLOTS
