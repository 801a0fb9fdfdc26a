from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from gateway.config.routing import PluginSpec, ProfileSpec, RoutingSettings, ScorerSpec
from gateway.policy.routing.filters import FreeSlot, Healthy, NotEjected, Serves
from gateway.policy.routing.pickers import MaxScore
from gateway.policy.routing.plugin import PluginEnv
from gateway.policy.routing.profile import FILTERS, Profile, Registry, build_profile
from gateway.policy.routing.router import Router
from gateway.policy.routing.scorers import Load, Prefix
from gateway.policy.routing.snapshot import Replica
from gateway.types import GenerationRequest, Message, Sampling

from ._util import DOWN, names, rep, req


def _profile(seed: int = 0, **spec: Any) -> Profile:
    return build_profile(msgspec.convert(spec, ProfileSpec), PluginEnv(random.Random(seed)))


def test_default_profile_shape() -> None:
    p = _profile()
    assert [type(f) for f in p.filters] == [Serves, NotEjected, Healthy, FreeSlot]
    assert [(type(s), w) for s, w in p.scorers] == [(Load, 1.0), (Prefix, 1.0)]
    assert isinstance(p.picker, MaxScore)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"filters": [{"type": "nope"}]}, r"routing\.profile\.filters\[0\]\.type: unknown filter"),
        (
            {"scorers": [{"type": "load"}, {"type": "prefix", "params": {"load_epsilon": -1}}]},
            r"routing\.profile\.scorers\[1\]\.params: .*load_epsilon",
        ),
        (
            {"scorers": [{"type": "session", "params": {"bogus": 1}}]},
            r"scorers\[0\]\.params: .*bogus",
        ),
        ({"filters": [{"type": "free_slot", "params": {"x": 1}}]}, r"filters\[0\]\.params"),
        ({"picker": {"type": "best"}}, r"routing\.profile\.picker\.type: unknown picker 'best'"),
    ],
)
def test_bad_profile_names_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _profile(**spec)


def test_registry() -> None:
    r: Registry[object] = Registry("thing")
    r.register("a", msgspec.Struct, lambda p, env: "built")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already registered"):
        r.register("a", msgspec.Struct, lambda p, env: "again")  # type: ignore[arg-type]
    assert r.names() == ["a"]
    assert "serves" in FILTERS.names()


def least_loaded(replicas: list[Replica], rng: random.Random) -> int:
    """The oracle: lowest occupancy (requests over slots), a random one among ties."""

    def load(r: Replica) -> float:
        return (max(r.inflight, r.running) + r.waiting) / max(1, r.max_num_seqs)

    best = min(load(r) for r in replicas)
    ties = [i for i, r in enumerate(replicas) if load(r) == best]
    return ties[0] if len(ties) == 1 else rng.choice(ties)


@pytest.mark.parametrize("seed", range(40))
def test_default_profile_picks_what_least_loaded_picks(seed: int) -> None:
    """Without prefix or session features, the default profile is today's least-loaded pick,
    the same replica for the same random draws, ties included."""
    gen = random.Random(seed)
    replicas = [
        rep(
            f"r{i}",
            running=gen.randrange(0, 5),
            waiting=gen.randrange(0, 3),
            inflight=gen.randrange(0, 5),
            slots=gen.choice([4, 8]),
        )
        for i in range(gen.randrange(1, 7))
    ]
    expected = replicas[least_loaded(replicas, random.Random(seed))]
    assert _profile(seed).route(req(), replicas, 0.0) is expected


def test_route_nothing_qualifies() -> None:
    p = _profile()
    assert p.route(req("other"), [rep("a")], 0.0) is None
    assert p.route(req(), [rep("a", health=DOWN)], 0.0) is None
    assert p.route(req(), [], 0.0) is None
    assert p.ranked(req(), [], 0.0) == []


def test_route_excludes_tried_replicas() -> None:
    p = _profile()
    replicas = [rep("a"), rep("b", running=3), rep("c", running=5)]
    assert p.route(req(), replicas, 0.0, exclude={"a"}) is replicas[1]
    assert p.route(req(), replicas, 0.0, exclude=["a", "b"]) is replicas[2]
    assert p.route(req(), replicas, 0.0, exclude=("a", "b", "c")) is None


def test_ranked_is_the_fallback_order() -> None:
    p = _profile()
    replicas = [rep("a", running=5), rep("b", running=1), rep("c", running=3), rep("d", running=5)]
    assert names(p.ranked(req(), replicas, 0.0)) == ["b", "c", "a", "d"]


def test_prefix_affinity_with_the_load_bound() -> None:
    p = _profile()  # load + prefix, load_epsilon 0.25, load_slack 0.1
    a, b, c = rep("a"), rep("b"), rep("c")
    pool = [a, b, c]
    first = p.route(req(hashes=(1, 2, 3)), pool, 0.0)
    assert first is not None
    first.running = 1  # 2 <= ceil((1.25 x 2 / 24 + 0.1) x 8) = 2: within the bound, affinity wins
    assert p.route(req(hashes=(1, 2, 3)), pool, 0.0) is first
    assert p.route(req(hashes=(1, 2, 9)), pool, 0.0) is first  # shares 2 of 3 blocks
    first.running = 3  # 4 > ceil((1.25 x 4 / 24 + 0.1) x 8) = 3: over the bound, least loaded
    second = p.route(req(hashes=(1, 2, 3)), pool, 0.0)
    assert second is not first and second is not None
    second.running = 3
    first.running = 0
    assert p.route(req(hashes=(1, 2, 3)), pool, 0.0) is first  # still an owner, least loaded


def test_session_affinity_end_to_end() -> None:
    p = _profile(scorers=[{"type": "load"}, {"type": "session", "weight": 2}])
    pool = [rep(n) for n in "abcde"]
    chosen = {sid: p.route(req(session=sid), pool, 0.0) for sid in ("u1", "u2", "u3", "u4")}
    for r in pool:
        r.running = 1
    for sid, r in chosen.items():
        assert p.route(req(session=sid), pool, 0.0) is r


def test_zero_weight_scorer_is_off() -> None:
    p = _profile(scorers=[{"type": "load"}, {"type": "session", "weight": 0}])
    assert [type(s) for s, _ in p.scorers] == [Load]
    assert _profile(scorers=[]).route(req(), [rep("a"), rep("b")], 0.0) is not None


def test_router_features() -> None:
    settings = msgspec.convert({"prefix": {"block_chars": 4, "max_blocks": 8}}, RoutingSettings)
    router = Router(settings, None, random.Random(0))
    prompt = GenerationRequest("r", "m", Sampling(max_tokens=1), prompt="abcdefgh", session_id="s")
    f = router.features(prompt)
    assert (f.model, f.lora, f.session_id, len(f.prefix_hashes)) == ("m", "", "s", 2)
    chat = GenerationRequest(
        "r", "m", Sampling(max_tokens=1), messages=(Message("user", "hello world"),), lora="x"
    )
    assert len(router.features(chat).prefix_hashes) == 4
    no_prefix = RoutingSettings(profile=ProfileSpec(scorers=(ScorerSpec(type="load"),)))
    assert Router(no_prefix, None).features(prompt).prefix_hashes == []


def test_specs_are_plain_config() -> None:
    assert PluginSpec(type="serves").params == {}


def test_router_carry_over_keeps_the_prefix_index() -> None:
    old = Router(RoutingSettings(), None, random.Random(0))
    pool = [rep("a"), rep("b"), rep("c")]
    f = req(hashes=(1, 2))
    first = old.profile.route(f, pool, 0.0)
    assert first is not None
    # The owner is now busier than the others, within the prefix load bound: only what the
    # old router learned keeps the request there (load alone picks one of the idle ones).
    first.running = 1
    fresh = Router(RoutingSettings(seed=3), None, random.Random(1))
    assert fresh.profile.route(f, pool, 0.0) is not first
    new = Router(RoutingSettings(seed=3), None, random.Random(1))
    new.carry_over(old)
    assert new.profile.route(f, pool, 0.0) is first
    other_hashing = Router(
        msgspec.convert({"prefix": {"block_chars": 8}}, RoutingSettings), None, random.Random(0)
    )
    other_hashing.carry_over(old)
    prefix = other_hashing.profile.scorers[1][0]
    assert isinstance(prefix, Prefix) and prefix.indexes == {}
    assert other_hashing.profile.route(f, pool, 0.0) is not first
