from __future__ import annotations

import pytest

from gateway.policy.discovery import Member, MemberState, diff

R, D = MemberState.ROUTABLE, MemberState.DRAINING


def _set(spec: str) -> dict[str, Member]:
    """ "a@1 b@2~": a at 1 routable, b at 2 draining."""
    out = {}
    for item in spec.split():
        state = D if item.endswith("~") else R
        name, address = item.rstrip("~").split("@")
        out[name] = Member(name, f"10.0.0.{address}:50061", state)
    return out


@pytest.mark.parametrize(
    ("current", "discovered", "add", "drain", "remove", "after"),
    [
        ("", "", "", "", "", ""),
        ("", "a@1 b@2", "a b", "", "", "a@1 b@2"),  # new ones connected
        ("a@1 b@2", "a@1 b@2", "", "", "", "a@1 b@2"),  # the same: nothing
        ("a@1 b@2", "a@1", "", "", "b", "a@1"),  # gone: removed
        ("a@1 b@2", "a@1 b@2~", "", "b", "", "a@1 b@2~"),  # terminating: drained, kept
        ("a@1 b@2~", "a@1 b@2~", "", "", "", "a@1 b@2~"),  # still draining: nothing more
        ("a@1 b@2~", "a@1", "", "", "b", "a@1"),  # a draining one gone: removed
        ("a@1 b@2~", "a@1 b@2", "b", "", "", "a@1 b@2"),  # ready again: connected again
        ("", "a@1~", "", "", "", ""),  # never routable: never taken in
        ("a@1", "a@3", "a", "", "a", "a@3"),  # a new address: the old goes, the new comes
        ("a@1", "a@3~", "", "", "a", ""),  # a new address not ready: only the old goes
        ("a@1 b@2", "", "", "", "a b", ""),  # a complete empty view empties the set
    ],
)
def test_diff(current: str, discovered: str, add: str, drain: str, remove: str, after: str) -> None:
    plan = diff(_set(current), _set(discovered))
    assert [m.name for m in plan.add] == add.split()
    assert list(plan.drain) == drain.split()
    assert list(plan.remove) == remove.split()
    assert dict(plan.members) == _set(after)
    assert plan.changed is bool(add or drain or remove)


def test_routable_leaves_out_draining_members() -> None:
    plan = diff({}, _set("a@1 b@2"))
    plan = diff(plan.members, _set("a@1~ b@2"))
    assert [m.name for m in plan.routable()] == ["b"]
