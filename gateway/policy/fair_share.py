"""One priority class's waiting line: token-fair between tenants (VTC), earliest deadline
first within a tenant.

Each tenant with waiters in the class is a flow with a virtual token counter: the tokens its
requests were charged, divided by its weight. The next waiter is the earliest-due waiter of
the backlogged flow with the least counter (ties: the flow whose head was queued first). A
pop charges the flow the waiter's cost (its prompt and max_tokens estimate); `settle` corrects
the counter by the difference once the real usage is known, and a requeued (preempted) waiter
is refunded its charge, to be charged again when it leaves again. A flow that becomes
backlogged has its counter lifted to the least counter of the flows backlogged then (or, with
none, to the counter the last pop started from), so that a tenant banks no credit while idle.
This is the Virtual Token Counter of Sheng et al., "Fairness in Serving Large Language Models"
(OSDI 2024), with the counter charged at dispatch and trued up at the end.

It replaces self-clocked fair queuing by finish tags stamped at arrival. The two agree on
backlogged tenants with exact estimates; they differ when estimates are wrong or tenants come
and go: a tag fixed at arrival keeps a waiter's place even after its tenant's earlier requests
turned out cheaper or dearer, while the counter is read afresh at every pop, so a settlement
applies to the very next choice. And a counter per tenant lets the tenant's own waiters go in
any order (earliest deadline first), which per-waiter tags cannot express.

Removal is lazy (entries are marked and skipped); heaps are compacted once mostly stale.
"""

from __future__ import annotations

import heapq
from typing import Any, Protocol


class Entry(Protocol):
    """What a flow reads of a waiter."""

    tenant: str
    weight: float
    cost: float
    due: float
    arrival: float
    seq: int
    charged: float

    @property
    def epoch(self) -> int: ...

    @property
    def queued(self) -> bool: ...


class Flow:
    __slots__ = ("counter", "heap", "live", "order", "version")

    def __init__(self, order: int) -> None:
        self.counter = 0.0
        self.live = 0
        self.order = order  # its head's queue order when it entered the ready heap (ties)
        self.version = 0  # of its entry in the class's ready heap
        self.heap: list[tuple[float, float, int, int, Any]] = []

    def head(self) -> Any:
        """Its earliest-due live waiter (the flow is backlogged)."""
        heap = self.heap
        while heap:
            if _live(heap[0]):
                return heap[0][-1]
            heapq.heappop(heap)
        return None


class FairClass:
    __slots__ = ("flows", "ready", "vtime")

    def __init__(self) -> None:
        self.flows: dict[str, Flow] = {}
        self.ready: list[tuple[float, int, int, Flow]] = []  # (counter, order, version, flow)
        self.vtime = 0.0

    def _least(self) -> Flow | None:
        ready = self.ready
        while ready:
            _, _, version, flow = ready[0]
            if flow.live and version == flow.version:
                return flow
            heapq.heappop(ready)
        return None

    def _ready(self, flow: Flow, head: Entry | None = None) -> None:
        """(Re)enter `flow` in the ready heap at its counter; ties go to the flow whose head
        waiter was queued first."""
        if head is None:
            head = flow.head()
            if head is None:
                return
        flow.version += 1
        flow.order = head.seq
        heapq.heappush(self.ready, (flow.counter, flow.order, flow.version, flow))

    def enter(self, w: Entry) -> None:
        flow = self.flows.get(w.tenant)
        if flow is None:
            flow = self.flows[w.tenant] = Flow(0)
        if not flow.live:
            least = self._least()
            floor = least.counter if least is not None else self.vtime
            if flow.counter < floor:
                flow.counter = floor
            flow.live = 1
            heapq.heappush(flow.heap, (w.due, w.arrival, w.seq, w.epoch, w))
            self._ready(flow, w)
            return
        flow.live += 1
        heapq.heappush(flow.heap, (w.due, w.arrival, w.seq, w.epoch, w))

    def leave(self, w: Entry) -> None:
        """`w` is out (popped, removed, evicted or expired)."""
        flow = self.flows[w.tenant]
        flow.live -= 1
        if len(flow.heap) > 2 * flow.live + 16:
            flow.heap = [i for i in flow.heap if _live(i)]
            heapq.heapify(flow.heap)
        if len(self.ready) > 2 * len(self.flows) + 16:
            self.ready = [i for i in self.ready if i[-1].live and i[2] == i[-1].version]
            heapq.heapify(self.ready)

    def peek(self) -> Any:
        flow = self._least()
        return None if flow is None else flow.head()

    def charge(self, w: Entry) -> None:
        """`w` was popped (the caller then calls `leave`): its flow pays its cost."""
        flow = self.flows[w.tenant]
        heapq.heappop(flow.heap)  # (it was the head)
        self.vtime = flow.counter
        w.charged = w.cost / w.weight
        flow.counter += w.charged
        if flow.live > 1:
            self._ready(flow)

    def refund(self, w: Entry) -> None:
        """A popped waiter comes back (preempted): its charge is undone before it enters."""
        flow = self.flows.get(w.tenant)
        if flow is not None:
            flow.counter -= w.charged
            if flow.live:
                self._ready(flow)
        w.charged = 0.0

    def settle(self, tenant: str, delta: float) -> None:
        """Correct a flow's counter by `delta` (already divided by its weight)."""
        flow = self.flows.get(tenant)
        if flow is None:
            return
        flow.counter += delta
        if flow.live:
            self._ready(flow)


def _live(item: tuple[float, float, int, int, Any]) -> bool:
    w = item[-1]
    return bool(w.queued) and item[-2] == w.epoch
