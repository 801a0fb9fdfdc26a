"""The sim core with sampling fields: each takes effect, and a resumed request continues exactly."""

from __future__ import annotations

from typing import Any

import pytest

from engine_sidecar.backend import Sampling
from engine_sidecar.backends.sim.config import SimConfig
from engine_sidecar.backends.sim.sampler import RAW_LOGPROBS
from engine_sidecar.backends.sim.tokenizer import SimTokenizer
from tests.requests import engine_request

from ._util import Run, prompt_ids, run_one

TOK = SimTokenizer()
NO_EOS = SimConfig(eos_every=0)
W = TOK.encode(" river")[0]  # a word: the id the biases below favour


def run(
    config: SimConfig = NO_EOS,
    resume: tuple[int, ...] = (),
    prompt: tuple[int, ...] | None = None,
    **kw: Any,
) -> Run:
    kw.setdefault("max_tokens", 48)
    kw.setdefault("seed", 11)
    r = engine_request(
        1,
        resume,
        request_id="r1",
        model="sim-llama",
        sampling=Sampling(**kw),
        prompt_token_ids=prompt or prompt_ids(12, 3),
    )
    return run_one(config, r)


def logprobs(r: Run) -> list[Any]:
    return [lp for d in r.deltas for lp in d.logprobs or []]


FIELDS: list[dict[str, Any]] = [
    {},
    {"temperature": 0.0},
    {"temperature": 0.7, "top_k": 20, "top_p": 0.8},
    {"min_p": 0.3},
    {"logit_bias": {W: 3.0}},
    {"presence_penalty": 1.5, "logit_bias": {W: 3.0}},
    {"frequency_penalty": 0.8, "logit_bias": {W: 3.0}},
    {"repetition_penalty": 1.7, "temperature": 0.0},
    {"allowed_token_ids": tuple(TOK.encode(" river sea sky sun moon"))},
    {"bad_words": ("the", "river sea")},
]


@pytest.mark.parametrize("config", [NO_EOS, SimConfig(eos_every=0, multibyte_every=3)])
@pytest.mark.parametrize("kw", FIELDS, ids=lambda kw: ",".join(kw) or "plain")
def test_resumed_run_continues_its_tokens_and_logprobs(
    kw: dict[str, Any], config: SimConfig
) -> None:
    full = run(config, logprobs=2, **kw)
    assert len(full.tokens) == 48
    lps = logprobs(full)
    assert [lp.ids[0] for lp in lps] == full.tokens
    for cut in (1, 17, 40):
        again = run(config, resume=tuple(full.tokens[:cut]), logprobs=2, **kw)
        assert again.tokens == full.tokens[cut:]
        assert logprobs(again) == lps[cut:]


@pytest.mark.parametrize("kw", FIELDS, ids=lambda kw: ",".join(kw) or "plain")
def test_logprobs_do_not_change_the_tokens(kw: dict[str, Any]) -> None:
    with_logprobs = run(logprobs=5, **kw)
    assert len(logprobs(with_logprobs)) == len(with_logprobs.tokens) == 48
    assert with_logprobs.tokens == run(**kw).tokens


def sampled_logprobs(**kw: Any) -> list[float]:
    return [lp.logprobs[0] for lp in logprobs(run(logprobs=0, max_tokens=200, **kw))]


@pytest.mark.parametrize(
    ("kw", "lowest_rank"),
    [
        ({"temperature": 0.0}, 0),
        ({"top_k": 3}, 2),
        ({"min_p": 0.5}, 5),  # exp(-k/8) >= 0.5
    ],
)
def test_truncations_draw_only_the_top_ranks(kw: dict[str, Any], lowest_rank: int) -> None:
    got = sampled_logprobs(**kw)
    assert min(got) == pytest.approx(RAW_LOGPROBS[lowest_rank])
    assert min(sampled_logprobs()) < RAW_LOGPROBS[lowest_rank]  # (which they cut off)


def count(**kw: Any) -> int:
    return run(max_tokens=200, temperature=0.0, logit_bias={W: 3.0}, **kw).tokens.count(W)


def test_penalties_hold_back_a_favoured_word() -> None:
    favoured = count()
    assert favoured >= 4  # the bias makes it the greedy choice wherever it is in the top 24
    assert count(presence_penalty=10.0) == 1  # once seen, never the greedy choice again
    assert 1 < count(frequency_penalty=0.5) < favoured
    assert count(repetition_penalty=3.0) == 1
    assert count(repetition_penalty=3.0, prompt=(W, *prompt_ids(11, 3))) == 0


def test_logit_bias_allowed_and_bad_words_steer_the_tokens() -> None:
    assert set(run(logit_bias={W: 100.0}).tokens) == {W}
    allowed = tuple(TOK.encode(" river sea sky"))
    assert set(run(allowed_token_ids=allowed).tokens) <= set(allowed)
    split_words = SimConfig(eos_every=0, multibyte_every=2)
    assert set(run(split_words, allowed_token_ids=allowed).tokens) <= set(allowed)
    plain = run(temperature=0.0).tokens
    banned = TOK.decode_token(plain[0]).strip()
    steered = run(temperature=0.0, bad_words=(banned,)).tokens
    assert plain[0] not in steered and steered != plain


def test_the_same_request_gives_the_same_tokens() -> None:
    kw: dict[str, Any] = {"presence_penalty": 0.4, "repetition_penalty": 1.2, "min_p": 0.05}
    assert run(**kw).tokens == run(**kw).tokens != run().tokens
    assert run(**kw).tokens != run(**{**kw, "seed": 12}).tokens


def test_logprobs_of_every_word() -> None:
    lps = logprobs(run(logprobs=-1, max_tokens=4))
    assert [len(lp.ids) for lp in lps] == [len(TOK.word_ids)] * 4
