from __future__ import annotations

import pytest

from gateway.config.tenants import QueueBounds, SchedulingConfig
from gateway.policy.priority_queue import Accepted, Overflow, PriorityQueue, Waiter

from ._util import T0

W = Waiter[str]


def w(
    name: str,
    priority: int = 0,
    tenant: str = "a",
    arrival: float = T0,
    cost: float = 10,
    weight: float = 1.0,
) -> W:
    return Waiter(tenant, priority, arrival, cost, name, weight)


def queue(max_queued: int = 10_000, **classes: QueueBounds) -> PriorityQueue[str]:
    cfg = SchedulingConfig(
        max_queued=max_queued,
        classes={int(k.removeprefix("c").replace("m", "-")): v for k, v in classes.items()},
        retry_after_s=2.0,
    )
    return PriorityQueue(cfg)


def push(q: PriorityQueue[str], *ws: W, now: float = T0) -> None:
    for x in ws:
        r = q.push(x, now)
        assert isinstance(r, Accepted) and r.evicted is None, r


def drain(q: PriorityQueue[str]) -> list[str]:
    out = []
    while (x := q.pop()) is not None:
        out.append(x.payload)
    return out


# -- order ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pushed", "popped"),
    [
        ([("a", 0), ("b", 10), ("c", -5), ("d", 10), ("e", 0)], ["b", "d", "a", "e", "c"]),
        ([("a", -1), ("b", -2), ("c", 3)], ["c", "a", "b"]),
        ([("a", 0), ("b", 0), ("c", 0)], ["a", "b", "c"]),
    ],
)
def test_higher_class_first_then_arrival(pushed: list[tuple[str, int]], popped: list[str]) -> None:
    q = queue()
    for i, (name, prio) in enumerate(pushed):
        push(q, w(name, prio, arrival=T0 + i))
    assert len(q) == len(pushed)
    assert q.peek() is not None and q.peek().payload == popped[0]  # type: ignore[union-attr]
    assert drain(q) == popped
    assert len(q) == 0 and q.pop() is None and q.peek() is None


def test_one_tenant_leaves_in_arrival_order_whatever_the_costs() -> None:
    q = queue()
    push(q, *(w(f"r{i}", arrival=T0 + i, cost=c) for i, c in enumerate([500, 1, 80, 3, 1000])))
    assert drain(q) == ["r0", "r1", "r2", "r3", "r4"]


@pytest.mark.parametrize(
    ("weight_a", "cost_a", "weight_b", "cost_b"),
    [
        (1, 10, 1, 10),
        (3, 10, 1, 10),
        (1, 10, 2, 10),
        (1, 10, 1, 30),  # equal weights, unequal costs: equal tokens, 3x the requests
        (4, 100, 1, 7),
    ],
)
def test_weighted_fairness_between_two_backlogged_tenants(
    weight_a: float, cost_a: float, weight_b: float, cost_b: float
) -> None:
    q = queue(c0=QueueBounds(max_depth=4000))
    # Tenant a floods first; b arrives after: arrival order must not decide.
    push(
        q, *(w("a", tenant="a", arrival=T0 + i, cost=cost_a, weight=weight_a) for i in range(2000))
    )
    push(
        q,
        *(
            w("b", tenant="b", arrival=T0 + 5000 + i, cost=cost_b, weight=weight_b)
            for i in range(2000)
        ),
    )
    served: dict[str, float] = {"a": 0.0, "b": 0.0}
    for _ in range(600):
        x = q.pop()
        assert x is not None
        served[x.tenant] += x.cost
    expected = weight_a / weight_b
    assert served["a"] / served["b"] == pytest.approx(expected, rel=0.05)


def test_a_tenant_arriving_late_is_served_promptly() -> None:
    q = queue()
    push(q, *(w(f"a{i}", tenant="a", arrival=T0 + i) for i in range(100)))
    for _ in range(50):
        q.pop()
    push(q, w("b0", tenant="b", arrival=T0 + 200))
    assert [q.pop().payload for _ in range(2)].count("b0") == 1  # type: ignore[union-attr]


def test_a_waiter_that_never_left_the_queue_settles_nothing() -> None:
    """Refused, expired or gone while queued: it was never charged, so ending it credits its
    tenant nothing (else a tenant whose waiters time out would move ahead)."""
    q = queue()
    push(q, w("a0", tenant="a", cost=100), w("b0", tenant="b", cost=100))
    a_gone = w("a-gone", tenant="a", cost=5000)
    push(q, a_gone)
    assert q.remove(a_gone)
    q.settle(a_gone, 0)
    assert q.pop().payload == "a0"  # type: ignore[union-attr]
    assert q.pop().payload == "b0"  # type: ignore[union-attr]


# -- bounds ---------------------------------------------------------------------------------


def test_class_depth_bound_and_who_is_to_blame() -> None:
    q = queue(c0=QueueBounds(max_depth=4))
    push(q, w("a1", tenant="a"), w("a2", tenant="a"), w("a3", tenant="a"), w("b1", tenant="b"))
    over_a = q.push(w("a4", tenant="a"), T0)
    over_b = q.push(w("b2", tenant="b"), T0)
    over_c = q.push(w("c1", tenant="c"), T0)
    assert isinstance(over_a, Overflow) and over_a.status == 429  # 3 of 4: over its half
    assert isinstance(over_b, Overflow) and over_b.status == 503  # 1 of 4: not its fault
    assert isinstance(over_c, Overflow) and over_c.status == 503
    assert over_a.retry_after_s == 2.0
    push(q, w("x", priority=1))  # other classes have their own depth
    assert len(q) == 5 and q.depth(0) == 4 and q.depth(1) == 1


def test_a_full_class_names_the_setting_of_its_depth() -> None:
    q = queue(c0=QueueBounds(max_depth=1))
    push(q, w("a"))
    listed = q.push(w("c"), T0)
    assert isinstance(listed, Overflow)
    assert "(scheduling.classes.0.max_depth)" in listed.reason
    q = PriorityQueue(SchedulingConfig(default=QueueBounds(max_depth=1)))
    push(q, w("d"))
    unlisted = q.push(w("e"), T0)
    assert isinstance(unlisted, Overflow)
    assert "(scheduling.default.max_depth)" in unlisted.reason


def test_weights_shape_the_blame() -> None:
    q = queue(c0=QueueBounds(max_depth=4))
    push(q, *(w(f"a{i}", tenant="a", weight=3) for i in range(3)), w("b", tenant="b"))
    r = q.push(w("a", tenant="a", weight=3), T0)
    assert isinstance(r, Overflow) and r.status == 429  # 3 of 4 is its share (3/4)
    q2 = queue(c0=QueueBounds(max_depth=4))
    push(
        q2,
        *(w(f"a{i}", tenant="a", weight=4) for i in range(2)),
        w("b1", tenant="b"),
        w("b2", tenant="b"),
    )
    r = q2.push(w("a", tenant="a", weight=4), T0)
    assert isinstance(r, Overflow) and r.status == 503  # 2 of 4 is below its share (4/5)


@pytest.mark.parametrize(
    ("queued", "arriving", "evicted"),
    [
        # lowest class first, newest within it
        ([("s1", -5), ("s2", -5), ("n1", 0)], ("g", 10), "s2"),
        ([("n1", 0), ("s1", -5), ("t1", -9)], ("g", 10), "t1"),
        ([("n1", 0), ("n2", 0), ("g1", 10)], ("g", 10), "n2"),
        ([("n1", 0), ("s1", -5), ("s2", -1)], ("x", -1), "s1"),  # strictly below only
    ],
)
def test_full_queue_evicts_lowest_class_newest(
    queued: list[tuple[str, int]], arriving: tuple[str, int], evicted: str
) -> None:
    q = queue(max_queued=3)
    for i, (name, prio) in enumerate(queued):
        push(q, w(name, prio, arrival=T0 + i))
    r = q.push(w(arriving[0], arriving[1], arrival=T0 + 10), T0 + 10)
    assert isinstance(r, Accepted) and r.evicted is not None
    assert r.evicted.payload == evicted and not r.evicted.queued
    assert len(q) == 3
    assert evicted not in drain(q)
    assert q.evicted.status == 503


@pytest.mark.parametrize("arriving", [-5, 0])
def test_full_queue_refuses_when_nothing_lower(arriving: int) -> None:
    q = queue(max_queued=2)
    push(q, w("a", 0, tenant="x"), w("b", 0, tenant="y"))
    r = q.push(w("c", arriving, tenant="z"), T0)
    assert isinstance(r, Overflow) and r.status == 503
    assert r.reason == "queue is full (scheduling.max_queued)"  # (the setting that moves it)
    assert drain(q) == ["a", "b"]


def test_successive_evictions_shed_sheddable_classes_first() -> None:
    q = queue(max_queued=4)
    push(
        q,
        w("n1", 0),
        w("s1", -5, arrival=T0 + 1),
        w("n2", 0, arrival=T0 + 2),
        w("s2", -5, arrival=T0 + 3),
    )
    evicted = []
    for i in range(5):
        r = q.push(w(f"g{i}", 10), T0)
        if isinstance(r, Accepted):
            assert r.evicted is not None
            evicted.append(r.evicted.payload)
        else:
            evicted.append("refused")
    assert evicted == ["s2", "s1", "n2", "n1", "refused"]


# -- expiry ---------------------------------------------------------------------------------


def test_expiry_per_class() -> None:
    q = queue(c0=QueueBounds(max_wait_s=5), c10=QueueBounds(max_wait_s=60))
    push(q, w("n", 0), w("g", 10))
    push(q, w("n-late", 0), now=T0 + 2)
    assert q.next_deadline() == T0 + 5
    assert q.expired(T0 + 4.999) == ()
    assert [x.payload for x in q.expired(T0 + 5)] == ["n"]
    assert q.next_deadline() == T0 + 7
    assert [x.payload for x in q.expired(T0 + 100)] == ["n-late", "g"]
    assert len(q) == 0 and q.next_deadline() is None


def test_removed_waiters_neither_expire_nor_pop() -> None:
    q = queue()
    a, b, c = w("a"), w("b", arrival=T0 + 1), w("c", arrival=T0 + 2)
    push(q, a, b, c)
    assert q.remove(b) and not q.remove(b)
    assert not q.remove(w("stranger"))
    assert not b.queued and len(q) == 2
    assert [x.payload for x in q.expired(T0 + 1e9)] == ["a", "c"]
    push(q, d := w("d"))
    assert q.remove(d)
    assert q.pop() is None


# -- requeue after preemption ---------------------------------------------------------------


def test_requeue_keeps_the_original_order() -> None:
    q = queue()
    push(q, *(w(f"a{i}", tenant="a", arrival=T0 + i) for i in range(3)))
    push(q, w("b0", tenant="b", arrival=T0 + 0.5))
    first = q.pop()
    assert first is not None and first.payload == "a0"
    push(q, w("a3", tenant="a", arrival=T0 + 3), w("b1", tenant="b", arrival=T0 + 3))
    q.requeue(first)  # preempted: back in front of everything that came after it
    assert drain(q)[0] == "a0"


def test_requeue_behind_higher_classes_ahead_of_its_own() -> None:
    q = queue()
    push(q, w("low0", 0), w("low1", 0, arrival=T0 + 1))
    low0 = q.pop()
    assert low0 is not None
    push(q, w("high", 10, arrival=T0 + 2))
    q.requeue(low0)
    assert drain(q) == ["high", "low0", "low1"]


def test_requeued_waiters_are_never_evicted_refused_or_expired() -> None:
    q = queue(max_queued=1, c0=QueueBounds(max_depth=1, max_wait_s=1))
    push(q, w("a", 0))
    a = q.pop()
    assert a is not None
    push(q, w("b", 0))
    q.requeue(a)  # over both bounds: still accepted
    assert len(q) == 2 and q.depth(0) == 2
    r = q.push(w("g", 10), T0)
    assert isinstance(r, Accepted) and r.evicted is not None and r.evicted.payload == "b"
    assert [x.payload for x in q.expired(T0 + 100)] == ["g"]
    assert drain(q) == ["a"]


def test_misuse_is_an_error() -> None:
    q = queue()
    x = w("x")
    with pytest.raises(ValueError):
        q.requeue(x)  # never queued
    push(q, x)
    with pytest.raises(ValueError):
        q.push(x, T0)  # already in
    with pytest.raises(ValueError):
        q.requeue(x)
    q.pop()
    with pytest.raises(ValueError):
        q.push(x, T0)  # popped: requeue, not push


def test_stale_entries_are_compacted() -> None:
    q = queue()
    keep = w("keep", priority=-1)
    push(q, keep)
    for i in range(10_000):
        x = w(f"x{i}", priority=i % 3)
        push(q, x)
        if i % 2:
            assert q.remove(x)
        else:
            assert q.pop() is x
        if i % 7 == 0:
            assert q.pop() is keep
            q.requeue(keep)
    fair = [c.fair for c in q._classes.values()]
    flows = sum(len(f.heap) for c in fair for f in c.flows.values())
    ready = sum(len(c.ready) for c in fair)
    held = len(q._shed) + len(q._deadlines) + len(q._active) + flows + ready
    assert held <= 10 * len(q) + 256
    assert drain(q) == ["keep"]


# -- objectives: earliest deadline first within a tenant, token-fair between tenants --------


def test_a_tenants_waiters_leave_earliest_due_first() -> None:
    q = queue()
    for name, due in [("late", T0 + 9), ("none", None), ("soon", T0 + 1), ("mid", T0 + 5)]:
        x = w(name)
        if due is not None:
            x.due = due
        push(q, x)
    # (no target: due at arrival + the class's maximum wait, 30 s)
    assert drain(q) == ["soon", "mid", "late", "none"]


def test_due_order_never_crosses_classes() -> None:
    q = queue()
    urgent = w("urgent-low", priority=-1)
    urgent.due = T0
    push(q, urgent, w("relaxed-high", priority=1))
    assert drain(q) == ["relaxed-high", "urgent-low"]


def test_long_and_short_prompts_get_equal_tokens_at_saturation() -> None:
    """Tenant `long` asks 2,000 tokens a request, `short` 100; both always backlogged. Served
    tokens are shared within 10% of equal (by request count, short gets ~20x as many)."""
    q = queue()
    served = {"long": 0.0, "short": 0.0}
    n = 0
    for _ in range(4):
        push(q, w(f"long{n}", tenant="long", cost=2000), w(f"short{n}", tenant="short", cost=100))
        n += 1
    for _ in range(2000):
        x = q.pop()
        assert x is not None
        served[x.tenant] += x.cost
        push(q, w(f"{x.tenant}{n}", tenant=x.tenant, cost=x.cost))  # it stays backlogged
        n += 1
    share = served["long"] / (served["long"] + served["short"])
    assert abs(share - 0.5) < 0.05, served


def test_settle_trues_up_a_tenant_at_the_next_pop() -> None:
    """Unlike tags stamped at arrival, the counter is read afresh: a settlement reorders
    waiters already queued."""

    def run(settle: bool) -> list[str]:
        q = queue()
        push(q, w("a0", tenant="a", cost=100), w("b0", tenant="b", cost=100))
        a0, b0 = q.pop(), q.pop()
        assert a0 is not None and b0 is not None
        push(q, w("b1", tenant="b", cost=100), w("a1", tenant="a", cost=100))
        if settle:
            q.settle(a0, 10)  # a0 used 10 of its 100
        return drain(q)

    assert run(settle=False) == ["b1", "a1"]  # (a tie: the head queued first)
    assert run(settle=True) == ["a1", "b1"]


def test_an_idle_tenant_banks_no_credit() -> None:
    q = queue()
    for i in range(50):
        push(q, w(f"b{i}", tenant="b", cost=100))
    for _ in range(40):
        q.pop()
    # a arrives late: it starts at b's counter, so the two alternate instead of a running 40
    for i in range(5):
        push(q, w(f"a{i}", tenant="a", cost=100))
    assert [x[0] for x in drain(q)[:6]] == ["b", "a", "b", "a", "b", "a"]


def test_a_requeued_waiter_is_refunded_its_charge() -> None:
    q = queue()
    push(q, w("a0", tenant="a", cost=1000), w("b0", tenant="b", cost=10))
    a0 = q.pop()
    assert a0 is not None and a0.payload == "a0"
    q.requeue(a0)  # preempted: a is not charged for a0 twice
    push(q, w("b1", tenant="b", cost=10))
    assert drain(q)[0] == "a0"


def test_a_waiter_past_its_latest_start_expires_late() -> None:
    q = queue(c0=QueueBounds(max_wait_s=30))
    shed = w("shed")
    shed.shed_at = T0 + 2
    keep = w("keep")
    keep.shed_at = T0 + 60  # (after its class's maximum wait: that comes first)
    push(q, shed, keep)
    assert q.next_deadline() == T0 + 2
    assert q.expired(T0 + 1.9) == ()
    (out,) = q.expired(T0 + 2)
    assert out is shed and out.late
    (out,) = q.expired(T0 + 30)
    assert out is keep and not out.late
