"""The Backend contract (engine_sidecar/backend.py), the same for every backend."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine_sidecar.backend import EngineDelta, ErrorCode, Finish, RequestError
from tests.contract.harness import (
    Harness,
    cut_at,
    eventually,
    sent_before,
    split_cuts,
    text,
    tokens,
    whole_text,
)

pytestmark = pytest.mark.timeout(600)  # the first vLLM test also starts the shared engine

BAD, NOT_FOUND = ErrorCode.INVALID_ARGUMENT, ErrorCode.NOT_FOUND


async def test_info_names_the_served_model(harness: Harness) -> None:
    info = harness.backend.info()
    assert [m.name for m in info.models] == [harness.model]
    assert info.models[0].max_model_len > 0
    assert info.max_num_seqs > 0


async def test_stream_ends_with_finish_and_usage(harness: Harness) -> None:
    deltas = await harness.run(max_tokens=8)
    first, last = deltas[0], deltas[-1]
    assert first.prompt_tokens > 0
    assert 0 <= first.cached_tokens <= first.prompt_tokens
    assert all(d.finish is Finish.NONE for d in deltas[:-1])
    assert last.finish is Finish.LENGTH
    assert last.completion_tokens == 8
    assert last.prompt_tokens == first.prompt_tokens
    assert all(d.prompt_tokens == 0 for d in deltas[1:-1])
    if harness.caps.token_ids:
        assert len(tokens(deltas)) == 8
    if harness.kind != "vllm":  # random weights may well pick tokens that print nothing
        assert text(deltas)


async def test_a_stop_finish_counts_the_tokens_it_sent(harness: Harness) -> None:
    deltas = await harness.run(max_tokens=64, ignore_eos=False)
    last = deltas[-1]
    assert last.finish in (Finish.STOP, Finish.LENGTH)
    if harness.caps.token_ids:
        assert last.completion_tokens == len(tokens(deltas))


async def test_one_sink_call_per_engine_step(harness: Harness) -> None:
    if not harness.caps.step_batches:
        pytest.skip(f"{harness.kind}: responses arrive per request, with no engine step")
    keys = [harness.submit(max_tokens=6, prompt=f"Request number {i}") for i in range(3)]
    for key in keys:
        await harness.collector.finished(key)
    ours = [[d for d in call if d.key in keys] for call in harness.collector.calls]
    ours = [call for call in ours if call]
    # One delta per request per call, and the requests that advanced together came together.
    assert all(len({d.key for d in call}) == len(call) for call in ours)
    assert max(len(call) for call in ours) >= 2


def _invalid_cases(max_len: int) -> list[tuple[str, ErrorCode, dict[str, Any]]]:
    long_prompt = " shard" * (max_len + 1)
    return [
        ("model", NOT_FOUND, {"model": "no-such-model"}),
        ("lora", NOT_FOUND, {"lora": "no-such-adapter"}),
        ("prompt", BAD, {"prompt": ""}),
        ("messages", BAD, {"messages": ()}),
        ("prompt", BAD, {"prompt": "two inputs", "prompt_token_ids": (5, 6)}),
        ("max_tokens", BAD, {"max_tokens": 0}),
        ("prompt", BAD, {"prompt": long_prompt, "max_tokens": 1}),
        ("max_tokens", BAD, {"prompt": "Hello", "max_tokens": max_len}),
        ("resume_token_ids", BAD, {"max_tokens": 2, "resume_token_ids": (5, 6, 7)}),
    ]


@pytest.mark.parametrize("case", range(9))
async def test_bad_request_is_refused_with_its_field(harness: Harness, case: int) -> None:
    field, code, kwargs = _invalid_cases(harness.max_model_len)[case]
    request = harness.request(**kwargs)
    with pytest.raises(RequestError) as e:
        harness.backend.submit(request)
    assert (e.value.code, e.value.field) == (code, field), e.value.message
    assert e.value.message
    await harness.run(max_tokens=2)  # the engine goes on; nothing came for the refused one
    assert request.key not in harness.collector.by_key


async def test_duplicate_key_is_refused(harness: Harness) -> None:
    request = harness.request(max_tokens=50)
    harness.backend.submit(request)
    with pytest.raises(RequestError) as e:
        harness.backend.submit(request)
    assert (e.value.code, e.value.field) == (BAD, "key")
    harness.backend.abort(request.key)


async def test_no_delta_follows_an_abort(harness: Harness) -> None:
    c = harness.collector
    key = harness.submit(max_tokens=400)
    await c.first(key)
    harness.backend.abort(key)
    seen = len(c.by_key[key])
    harness.backend.abort(key)  # twice, and unknown keys, are fine
    harness.backend.abort(987_654_321)
    await harness.run(max_tokens=6)  # the engine ran on for several steps
    assert len(c.by_key[key]) == seen
    assert c.by_key[key][-1].finish is Finish.NONE


@pytest.mark.parametrize("stop", [(), ("\x07never\x07",)], ids=["plain", "stop-strings"])
async def test_resumed_request_continues_identically(
    harness: Harness, stop: tuple[str, ...]
) -> None:
    if not harness.caps.exact_resume:
        pytest.skip(f"{harness.kind}: text in, text out; resume is not token-exact")
    if stop and not harness.caps.stop_strings:
        pytest.skip(f"{harness.kind}: no stop strings")
    # A stop string that never matches: the engine holds its last characters back until the end.
    prompt = "The gateway routes shards"
    full = await harness.run(max_tokens=12, prompt=prompt, stop=stop)
    ids = tokens(full)
    assert len(ids) == 12
    cut = cut_at(full, 5)
    resumed = await harness.run(
        max_tokens=12, prompt=prompt, stop=stop, resume_token_ids=tuple(ids[:cut])
    )
    assert tokens(resumed) == ids[cut:]
    # The client's stream goes on with no character repeated or missing.
    assert sent_before(full, cut) + text(resumed) == text(full)
    assert resumed[0].prompt_tokens == full[0].prompt_tokens
    assert (resumed[-1].finish, resumed[-1].completion_tokens) == (Finish.LENGTH, 12)


async def test_resumed_request_continues_its_logprobs(harness: Harness) -> None:
    """Each token's logprobs, and their tokens' texts, as if the request had run at once:
    also where the cut splits a character (its tokens' texts need the tokens before)."""
    if not (harness.caps.exact_resume and harness.caps.logprobs):
        pytest.skip(f"{harness.kind}: no logprobs, or resume is not token-exact")
    prompt = "Grüße aus dem ☃-Land, café"
    full = await harness.run(max_tokens=14, prompt=prompt, logprobs=3)
    lps = [lp for d in full for lp in d.logprobs or []]
    ids = tokens(full)
    assert len(lps) == len(ids) == 14
    assert [lp.ids[0] for lp in lps] == ids  # the sampled token first
    assert all(len(lp.ids) in (3, 4) for lp in lps)
    for cut in (1, 5, 9):
        resumed = await harness.run(
            max_tokens=14, prompt=prompt, logprobs=3, resume_token_ids=tuple(ids[:cut])
        )
        again = [lp for d in resumed for lp in d.logprobs or []]
        assert [(lp.ids, lp.tokens) for lp in again] == [(lp.ids, lp.tokens) for lp in lps[cut:]]
        for a, b in zip(again, lps[cut:], strict=True):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-3)


def _late_stop(whole: str, after: int) -> str:
    """A piece of `whole` whose first occurrence ends beyond its first `after` characters."""
    for size in range(2, len(whole) + 1):
        for start in range(len(whole) - size + 1):
            stop = whole[start : start + size]
            if stop.strip() and whole.find(stop) + size > after:
                return stop
    raise AssertionError(f"no stop string completes after {after} characters of {whole!r}")


async def test_resumed_request_stops_where_an_uninterrupted_one_does(harness: Harness) -> None:
    if not (harness.caps.exact_resume and harness.caps.stop_strings):
        pytest.skip(f"{harness.kind}: resume is not token-exact, or no stop strings")
    prompt = "The gateway routes shards"
    plain = await harness.run(max_tokens=12, prompt=prompt)
    stop = (_late_stop(text(plain), len(sent_before(plain, cut_at(plain, 5)))),)
    full = await harness.run(max_tokens=12, prompt=prompt, stop=stop)
    ids = tokens(full)
    assert full[-1].finish is Finish.STOP and len(ids) > 5
    cut = cut_at(full, 5)
    resumed = await harness.run(
        max_tokens=12, prompt=prompt, stop=stop, resume_token_ids=tuple(ids[:cut])
    )
    assert tokens(resumed) == ids[cut:]
    assert sent_before(full, cut) + text(resumed) == text(full)
    assert (resumed[-1].finish, resumed[-1].completion_tokens) == (
        Finish.STOP,
        full[-1].completion_tokens,
    )


# Prompts whose continuation has a character split over two tokens: greedy output of the tiny
# random-weight model picks byte tokens after these, the fake Triton's words include "café",
# the sim here generates split words.
SPLIT_PROMPTS = ("The piñata", "déjà vu", "The façade", "Ωmega", "Tell me about shards.")
SPLIT_MAX_TOKENS = 16


async def _split_run(
    harness: Harness, stop: tuple[str, ...]
) -> tuple[str, list[EngineDelta], int] | None:
    """The first candidate prompt whose output has a cut inside a character, its deltas and
    that first cut; a cut a client can see (between deltas) where the engine's deltas carry
    its own tokens. None if no candidate has one. One request at a time: a batch of others
    must not change a greedy run's numbers."""
    decode = harness.tokenizer.decode
    for prompt in SPLIT_PROMPTS:
        deltas = await harness.run(max_tokens=SPLIT_MAX_TOKENS, prompt=prompt, stop=stop)
        ends = {sum(len(d.token_ids) for d in deltas[: i + 1]) for i in range(len(deltas))}
        cuts = split_cuts(decode, tokens(deltas))
        seen = [k for k in cuts if k in ends] if harness.caps.token_ids else cuts
        if seen:
            return prompt, deltas, seen[0]
    return None


@pytest.mark.parametrize("stop", [(), ("\x07never\x07",)], ids=["plain", "stop-strings"])
async def test_resume_at_a_split_character_loses_no_text(
    harness: Harness, stop: tuple[str, ...]
) -> None:
    if stop and not harness.caps.stop_strings:
        pytest.skip(f"{harness.kind}: no stop strings")
    found = await _split_run(harness, stop)
    assert found is not None, "no candidate prompt gives a character split over tokens"
    prompt, full, cut = found
    ids, decode = tokens(full), harness.tokenizer.decode
    before = whole_text(decode, ids[:cut])  # what the client has: not the partial character
    resumed = await harness.run(
        max_tokens=SPLIT_MAX_TOKENS, prompt=prompt, stop=stop, resume_token_ids=tuple(ids[:cut])
    )
    if harness.caps.exact_resume:
        sent = sent_before(full, cut)
        if not stop:  # (stop strings hold some whole characters back too)
            assert sent == before
        assert tokens(resumed) == ids[cut:]
        assert sent + text(resumed) == text(full)
    else:
        # Text in, text out: the engine continues from the text the client has, as a new
        # request on that text would.
        fresh = await harness.run(max_tokens=SPLIT_MAX_TOKENS - cut, prompt=prompt + before)
        assert text(resumed) == text(fresh)
    assert (resumed[-1].finish, resumed[-1].completion_tokens) == (
        Finish.LENGTH,
        SPLIT_MAX_TOKENS,
    )


async def test_resumed_with_all_its_tokens_finishes_at_once(harness: Harness) -> None:
    deltas = await harness.run(max_tokens=4, resume_token_ids=(5, 6, 7, 8))
    assert tokens(deltas) == []
    assert deltas[-1].finish is Finish.LENGTH
    assert deltas[-1].completion_tokens == 4
    assert deltas[0].prompt_tokens > 0


async def test_higher_class_runs_first_when_the_engine_is_full(harness: Harness) -> None:
    c = harness.collector
    # Blockers of different lengths: their slots free up one at a time.
    blockers = [
        harness.submit(max_tokens=150 + 20 * i, prompt=f"Blocker {i} fills a slot")
        for i in range(harness.max_num_seqs)
    ]
    for key in blockers:
        await c.first(key)
    low = harness.submit(max_tokens=2, prompt="low class", priority=0)
    high = harness.submit(max_tokens=2, prompt="high class", priority=5)
    await c.finished(high)
    await c.finished(low)
    assert c.position(high) < c.position(low)
    for key in blockers:
        harness.backend.abort(key)


async def test_load_reports_running_requests(harness: Harness) -> None:
    backend = harness.backend
    key = harness.submit(max_tokens=300)
    await harness.collector.first(key)
    await eventually(lambda: backend.load().running >= 1)
    snap = backend.load()
    assert snap.ready
    assert snap.max_num_seqs == backend.info().max_num_seqs
    assert 0.0 <= snap.kv_usage <= 1.0
    # Engine progress: a step count that moves while the engine works.
    before = snap.steps
    assert before is not None
    await eventually(lambda: (backend.load().steps or 0) > before)
    backend.abort(key)
    await harness.run(max_tokens=2)
    await eventually(lambda: backend.load().running == 0)
    assert backend.load().generated_tokens > 0


async def test_healthy_while_running(harness: Harness) -> None:
    assert harness.backend.healthy()
    await harness.run(max_tokens=2)
    assert harness.backend.healthy()


async def test_stop_ends_unfinished_requests_with_abort(harness: Harness) -> None:
    c = harness.collector
    key = harness.submit(max_tokens=400)
    await c.first(key)
    await harness.backend.stop()
    last = c.by_key[key][-1]
    assert last.finish is Finish.ABORT
    assert last.completion_tokens >= 1
    seen = len(c.by_key[key])
    with pytest.raises(RequestError) as e:
        harness.backend.submit(harness.request())
    assert e.value.code is ErrorCode.UNAVAILABLE
    await asyncio.sleep(0.1)
    assert len(c.by_key[key]) == seen
