"""Precise prefix routing: what the engines report they cache, matched at each replica's block
size, the gateway's short-lived guess, and the default profile's switch to it."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from shardgate.v1.kvblocks import block_names, start

from gateway.policy.routing.engine_cache import EngineCaches
from gateway.policy.routing.scorers import PrecisePrefix, PrecisePrefixParams, Prefix, PrefixParams
from gateway.policy.routing.snapshot import RequestFeatures

from ._util import rep

NO_BOUND = PrecisePrefixParams(load_epsilon=None)


@dataclass
class Events:
    """engine.proto KvEvents as a sidecar sends them."""

    stored: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    cleared: bool = False


def prompt(n: int, first: int = 100) -> list[int]:
    return list(range(first, first + n))


def held(ids: list[int], block_size: int, model: str = "m") -> list[int]:
    return block_names(ids, block_size, start(model))


def features(ids: list[int] | None, model: str = "m", lora: str = "") -> RequestFeatures:
    return RequestFeatures(model, lora, prompt_ids=ids)


def caches(**block_sizes: int) -> EngineCaches:
    c = EngineCaches()
    for name, bs in block_sizes.items():
        c.announced(name, bs)
    return c


def test_scores_are_the_share_of_the_prompt_each_engine_holds_as_a_leading_run() -> None:
    c = caches(a=4, b=4, c=4)
    ids = prompt(32)  # 8 blocks of 4
    c.apply("a", Events(stored=held(ids[:16], 4), cleared=True))  # its first 4 blocks
    c.apply("b", Events(stored=held(ids, 4)[1:]))  # all but the first: worth nothing
    scorer = PrecisePrefix(NO_BOUND, c)
    replicas = [rep("a"), rep("b"), rep("c")]
    assert scorer.score(features(ids), replicas, 0.0) == [0.5, 0.0, 0.0]


def test_replicas_with_other_block_sizes_compare_in_tokens() -> None:
    c = caches(a=4, b=8)
    ids = prompt(32)
    c.apply("a", Events(stored=held(ids[:12], 4)))  # 12 tokens
    c.apply("b", Events(stored=held(ids[:16], 8)))  # 16 tokens
    req = features(ids)
    assert PrecisePrefix(NO_BOUND, c).score(req, [rep("a"), rep("b")], 0.0) == [12 / 32, 0.5]
    assert set(req.kv_names) == {4, 8}  # (named once per block size, kept for retries)


def test_removed_and_cleared_blocks_no_longer_match() -> None:
    c = caches(a=4)
    ids = prompt(16)
    names = held(ids, 4)
    c.apply("a", Events(stored=names))
    c.apply("a", Events(removed=[names[2]]))
    scorer = PrecisePrefix(NO_BOUND, c)
    assert scorer.score(features(ids), [rep("a")], 0.0) == [0.5]
    c.apply("a", Events(cleared=True, stored=names[:1]))  # a snapshot: only what it says
    assert scorer.score(features(ids), [rep("a")], 0.0) == [0.25]
    c.lost("a")
    assert scorer.score(features(ids), [rep("a")], 0.0) == [0.0]
    assert c.snapshots == 1 and c.events == 6


def test_another_model_or_adapter_never_matches() -> None:
    c = caches(a=4)
    ids = prompt(16)
    c.apply("a", Events(stored=held(ids, 4, model="other")))
    scorer = PrecisePrefix(NO_BOUND, c)
    assert scorer.score(features(ids), [rep("a")], 0.0) == [0.0]
    c.apply("a", Events(stored=block_names(ids, 4, start("m", "sql"))))
    assert scorer.score(features(ids), [rep("a")], 0.0) == [0.0]
    assert scorer.score(features(ids, lora="sql"), [rep("a")], 0.0) == [1.0]


def test_the_replica_routed_to_counts_as_holding_the_prompt_until_its_guess_expires() -> None:
    c = caches(a=4, b=4)
    c.index.speculative_s = 2.0
    ids = prompt(16)
    scorer = PrecisePrefix(NO_BOUND, c)
    replicas = [rep("a"), rep("b")]
    first = features(ids)
    assert scorer.score(first, replicas, 0.0) == [0.0, 0.0]
    scorer.picked(first, replicas[1], 0.0)
    assert scorer.score(features(ids), replicas, 1.0) == [0.0, 1.0]
    assert scorer.score(features(ids), replicas, 2.5) == [0.0, 0.0]  # never confirmed


def test_the_load_bound_takes_affinity_from_a_crowded_replica() -> None:
    c = caches(a=4, b=4)
    ids = prompt(16)
    c.apply("a", Events(stored=held(ids, 4)))
    scorer = PrecisePrefix(PrecisePrefixParams(load_epsilon=0.25, load_slack=0.0), c)
    crowded = [rep("a", running=8, slots=8), rep("b", slots=8)]
    assert scorer.score(features(ids), crowded, 0.0) == [0.0, 0.0]


def test_it_counts_what_the_chosen_replica_held_against_the_best() -> None:
    c = caches(a=4, b=4)
    ids = prompt(16)
    c.apply("a", Events(stored=held(ids, 4)))
    scorer = PrecisePrefix(NO_BOUND, c)
    replicas = [rep("a"), rep("b")]
    req = features(ids)
    scorer.score(req, replicas, 0.0)
    scorer.picked(req, replicas[1], 0.0)
    assert (c.matched_requests, c.chosen_tokens, c.best_tokens) == (1, 0, 16)


@pytest.mark.parametrize(
    ("block_sizes", "ids", "precise"),
    [
        pytest.param({"a": 4, "b": 4}, prompt(16), True, id="every replica reports"),
        pytest.param({"a": 4}, prompt(16), False, id="one replica reports nothing"),
        pytest.param({"a": 4, "b": 4}, None, False, id="the prompt is not tokenized"),
    ],
)
def test_the_default_prefix_scorer_uses_the_engines_reports_when_all_replicas_send_them(
    block_sizes: dict[str, int], ids: list[int] | None, precise: bool
) -> None:
    c = caches(**block_sizes)
    if ids is not None:
        c.apply("a", Events(stored=held(ids, 4)))
    scorer = Prefix(PrefixParams(load_epsilon=None), c)
    replicas = [rep("a"), rep("b")]
    # What this gateway routed says "b"; what the engines hold says "a".
    approx = RequestFeatures("m", "", (1, 2, 3, 4), prompt_ids=ids)
    scorer.picked(approx, replicas[1], 0.0)
    c.index.cleared("b")  # (the guess the pick made)
    assert scorer.score(approx, replicas, 0.0) == ([1.0, 0.0] if precise else [0.0, 1.0])


def test_the_default_prefix_scorer_can_be_told_to_ignore_the_engines() -> None:
    c = caches(a=4, b=4)
    assert Prefix(PrefixParams(engine_events=False), c).precise is None
    assert Prefix(PrefixParams(), None).precise is None


def test_a_sidecar_that_stops_reporting_is_cleared_and_left_to_the_approximate_scorer() -> None:
    c = caches(a=4)
    ids = prompt(8)
    c.apply("a", Events(stored=held(ids, 4)))
    c.announced("a", 0)
    assert c.block_size("a") == 0 and c.index.blocks("a") == 0
    c.apply("a", Events(stored=held(ids, 4)))
    assert c.unexpected == 1 and c.index.blocks("a") == 0
    assert not PrecisePrefix(NO_BOUND, c).covers(features(ids), [rep("a")])
