from __future__ import annotations

import pytest

from engine_sidecar.backend import EngineRequest, Finish
from engine_sidecar.backends.sim.config import SimConfig
from engine_sidecar.backends.sim.core import SimCore
from engine_sidecar.backends.sim.tokenizer import SimTokenizer

from ._util import Run, drain, prompt_ids, req, run_one

NO_EOS = SimConfig(eos_every=0)
TOK = SimTokenizer()


def check_contract(run: Run, prompt_len: int) -> None:
    first, final = run.deltas[0], run.final
    assert first.prompt_tokens == prompt_len
    assert final.prompt_tokens == prompt_len
    assert final.completion_tokens == len(run.tokens)
    assert all(d.finish == Finish.NONE for d in run.deltas[:-1])
    assert all(d.prompt_tokens == 0 for d in run.deltas[1:-1])


@pytest.mark.parametrize(("max_num_seqs", "requests"), [(1, 5), (4, 50), (16, 40)])
def test_batch_limit_is_never_exceeded(max_num_seqs: int, requests: int) -> None:
    core = SimCore(SimConfig(max_num_seqs=max_num_seqs, eos_every=20))
    for k in range(requests):
        core.add(req(k, max_tokens=10 + k % 7))
    peak = 0
    seen = 0
    while core.has_work:
        result = core.step()
        assert core.num_running <= max_num_seqs
        assert result.batch_size <= max_num_seqs
        assert len(result.deltas) <= max_num_seqs
        peak = max(peak, result.batch_size)
        seen += sum(1 for d in result.deltas if d.finish)
    assert peak == max_num_seqs and seen == requests
    assert core.num_waiting == 0 and core.kv.num_used == 0


def test_contract_and_lengths() -> None:
    runs = drain(
        _core_with(NO_EOS, [req(k, prompt_ids(10 + k), max_tokens=5 + k) for k in range(6)])
    )
    for k, run in runs.items():
        check_contract(run, 10 + k)
        assert run.final.finish == Finish.LENGTH and len(run.tokens) == 5 + k
        assert len(run.deltas) == 5 + k  # one token per step, the last delta carries one too
        assert run.text == TOK.decode(run.tokens)
        assert all(4 <= t < 4 + len(TOK.word_ids) for t in run.tokens)


def _core_with(config: SimConfig, requests: list[EngineRequest]) -> SimCore:
    core = SimCore(config)
    for r in requests:
        core.add(r)
    return core


def test_priority_then_arrival_order() -> None:
    core = SimCore(SimConfig(max_num_seqs=1, eos_every=0))
    for key, prio in [(1, 0), (2, 5), (3, 0), (4, 5), (5, 9)]:
        core.add(req(key, max_tokens=2, priority=prio))
    order: list[int] = []
    while core.has_work:
        for d in core.step().deltas:
            if d.prompt_tokens and not order.count(d.key):
                order.append(d.key)
    assert order == [5, 2, 4, 1, 3]


def test_determinism_and_seeds() -> None:
    cfg = SimConfig(eos_every=50)
    a = run_one(cfg, req(1, prompt_ids(40), max_tokens=200))
    b = run_one(cfg, req(9, prompt_ids(40), max_tokens=200))
    assert (a.tokens, a.text, a.final.finish) == (b.tokens, b.text, b.final.finish)
    c = run_one(cfg, req(1, prompt_ids(40), max_tokens=200, seed=3))
    d = run_one(SimConfig(eos_every=50, seed=1), req(1, prompt_ids(40), max_tokens=200))
    e = run_one(cfg, req(1, prompt_ids(40, salt=1), max_tokens=200))
    assert len({tuple(x.tokens) for x in (a, c, d, e)}) == 4


@pytest.mark.parametrize("eos_every", [0, 7, 40])
@pytest.mark.parametrize("stop", [(), (" the",)])
def test_resume_continues_identically(eos_every: int, stop: tuple[str, ...]) -> None:
    cfg = SimConfig(eos_every=eos_every)
    prompt = prompt_ids(30)
    full = run_one(cfg, req(1, prompt, max_tokens=60, stop=stop))
    n = len(full.tokens)
    assert n >= 2
    for k in sorted({1, n // 3, n // 2, n - 1}):
        resumed = run_one(
            cfg, req(2, prompt, max_tokens=60, stop=stop, resume=tuple(full.tokens[:k]))
        )
        assert full.tokens[:k] + resumed.tokens == full.tokens
        assert resumed.final.finish == full.final.finish
        assert resumed.final.completion_tokens == n
        assert resumed.deltas[0].prompt_tokens == len(prompt)
        # What the client saw from the first k deltas plus the resumed run: the same text.
        seen = "".join(d.text for d in full.deltas[:k])
        assert seen + resumed.text == full.text


def test_resumed_with_max_tokens_already_generated() -> None:
    full = run_one(NO_EOS, req(1, max_tokens=5))
    again = run_one(NO_EOS, req(1, max_tokens=5, resume=tuple(full.tokens)))
    assert again.tokens == [] and again.final.finish == Finish.LENGTH
    assert again.final.completion_tokens == 5


@pytest.mark.parametrize(("max_tokens", "resume"), [(1, 0), (7, 0), (7, 3), (7, 6)])
def test_max_tokens_ends_with_length(max_tokens: int, resume: int) -> None:
    full = run_one(NO_EOS, req(1, max_tokens=max_tokens))
    assert len(full.tokens) == max_tokens and full.final.finish == Finish.LENGTH
    r = run_one(NO_EOS, req(1, max_tokens=max_tokens, resume=tuple(full.tokens[:resume])))
    assert len(r.tokens) == max_tokens - resume and r.final.completion_tokens == max_tokens


def test_eos_stops_and_ignore_eos_runs_on() -> None:
    cfg = SimConfig(eos_every=5)
    stopped = [run_one(cfg, req(k, max_tokens=500)) for k in range(20)]
    assert all(r.final.finish == Finish.STOP for r in stopped)
    assert all(r.final.token_ids == [] and r.final.text == "" for r in stopped)
    assert all(TOK.eos_id not in r.tokens for r in stopped)
    mean = sum(len(r.tokens) for r in stopped) / len(stopped)
    assert 2 <= mean <= 12
    ignoring = run_one(cfg, req(1, max_tokens=100, ignore_eos=True))
    assert ignoring.final.finish == Finish.LENGTH and len(ignoring.tokens) == 100
    assert ignoring.tokens[: len(stopped[1].tokens)] == stopped[1].tokens


def test_eos_never_at_the_first_position() -> None:
    r = run_one(SimConfig(eos_every=1), req(1, max_tokens=50))
    assert len(r.tokens) == 1 and r.final.finish == Finish.STOP


@pytest.mark.parametrize("span", ["inside", "across", "at_start"])
def test_stop_strings_cut_the_text(span: str) -> None:
    plain = run_one(NO_EOS, req(1, max_tokens=40))
    words = [TOK.decode_token(t) for t in plain.tokens]
    i = 5
    stop = {
        "inside": words[i][1:],  # a word without its space
        "across": words[i][-2:] + words[i + 1][:3],
        "at_start": words[0],
    }[span]
    expect = plain.text[: plain.text.index(stop)]
    r = run_one(NO_EOS, req(1, max_tokens=40, stop=(stop, "never-happens")))
    assert r.final.finish == Finish.STOP
    assert r.text == expect
    assert stop not in r.text
    assert r.tokens == plain.tokens[: len(r.tokens)]
    assert r.final.completion_tokens == len(r.tokens)
    assert r.final.stop_sequence == stop  # the engine names the stop string that ended it


def test_stop_text_held_back_is_flushed_at_length() -> None:
    plain = run_one(NO_EOS, req(1, max_tokens=12))
    r = run_one(NO_EOS, req(1, max_tokens=12, stop=("zzzzzzzzzzzzzzzzzzzz",)))
    assert r.text == plain.text and r.final.finish == Finish.LENGTH
    assert r.final.stop_sequence == ""


def test_prefix_cache_hit_makes_prefill_cheaper() -> None:
    core = SimCore(SimConfig(profile="llama-70b-a100-tp8", eos_every=0))
    shared = prompt_ids(512)
    core.add(req(1, shared + prompt_ids(20, 1), max_tokens=4))
    first = core.step()
    assert first.deltas[0].cached_tokens == 0 and first.prefill_tokens == 532
    drain(core)
    core.add(req(2, shared + prompt_ids(20, 2), max_tokens=4))
    second = core.step()
    assert second.deltas[0].cached_tokens == 512 and second.prefill_tokens == 20
    assert second.duration_s < first.duration_s
    assert core.kv.prefix_hit_rate() > 0.4


def test_prefill_budget_limits_admissions_per_step() -> None:
    core = SimCore(SimConfig(max_num_batched_tokens=100, max_model_len=256, eos_every=0))
    for k in range(5):
        core.add(req(k, prompt_ids(40, k), max_tokens=3))
    assert core.step().batch_size == 2  # 80 of 100 tokens
    assert core.step().batch_size == 4
    # A prompt larger than the whole budget still runs, alone.
    core2 = SimCore(SimConfig(max_num_batched_tokens=64, max_model_len=256, eos_every=0))
    core2.add(req(1, prompt_ids(200), max_tokens=3))
    core2.add(req(2, prompt_ids(10), max_tokens=3))
    assert core2.step().batch_size == 1
    assert core2.step().batch_size == 2


def test_kv_pressure_preempts_and_outputs_stay_identical() -> None:
    def make(num_kv_blocks: int) -> SimCore:
        return _core_with(
            SimConfig(max_model_len=256, block_size=16, num_kv_blocks=num_kv_blocks, eos_every=90),
            [req(k, prompt_ids(32, k), max_tokens=150, priority=k % 2) for k in range(10)],
        )

    calm, tight = make(2000), make(24)
    calm_runs, tight_runs = drain(calm), drain(tight)
    assert calm.preemptions == 0
    assert tight.preemptions > 0
    for k in range(10):
        assert tight_runs[k].tokens == calm_runs[k].tokens
        assert tight_runs[k].text == calm_runs[k].text
        assert tight_runs[k].final.finish == calm_runs[k].final.finish
        check_contract(tight_runs[k], 32)
    assert tight.kv.num_used == 0


def test_usage_rises_while_running_and_drops_after() -> None:
    core = _core_with(NO_EOS, [req(k, prompt_ids(100, k), max_tokens=20) for k in range(4)])
    core.step()
    used = core.kv.usage()
    assert used > 0
    drain(core)
    assert core.kv.usage() == 0.0
    assert core.generated_tokens == 80


@pytest.mark.parametrize("when", ["waiting", "running"])
def test_abort_yields_no_further_delta(when: str) -> None:
    core = _core_with(
        SimConfig(max_num_seqs=1, eos_every=0), [req(1, max_tokens=50), req(2, max_tokens=50)]
    )
    core.step()
    core.step()
    victim = 2 if when == "waiting" else 1
    core.abort(victim)
    core.abort(12345)  # unknown: ignored
    runs = drain(core)
    assert victim not in runs or all(d.key != victim for d in runs[victim].deltas)
    other = 1 if victim == 2 else 2
    assert runs[other].final.finish == Finish.LENGTH
    assert core.kv.num_used == 0 and core.num_waiting == 0 and victim not in core


def test_abort_all_ends_everything_with_abort() -> None:
    core = _core_with(
        SimConfig(max_num_seqs=2, eos_every=0), [req(k, max_tokens=50) for k in range(4)]
    )
    core.step()
    deltas = core.abort_all()
    assert sorted(d.key for d in deltas) == [0, 1, 2, 3]
    assert all(d.finish == Finish.ABORT and d.prompt_tokens == 16 for d in deltas)
    assert {d.key: d.completion_tokens for d in deltas} == {0: 1, 1: 1, 2: 0, 3: 0}
    assert not core.has_work and core.kv.num_used == 0


def test_many_aborted_waiting_requests_do_not_pile_up() -> None:
    core = SimCore(SimConfig(max_num_seqs=1))
    for k in range(1000):
        core.add(req(k))
        core.abort(k)
    assert core.num_waiting == 0 and not core.has_work
    assert len(core._waiting._heap) < 200


def test_duplicate_and_empty_are_refused() -> None:
    core = SimCore(NO_EOS)
    core.add(req(1))
    with pytest.raises(ValueError):
        core.add(req(1))
    with pytest.raises(ValueError):
        core.add(req(2, ()))


@pytest.mark.parametrize("stop", [(), ("\x07never\x07",)])
def test_split_words_resume_at_every_cut_with_no_text_lost(stop: tuple[str, ...]) -> None:
    config = SimConfig(eos_every=0, multibyte_every=3)
    full = run_one(config, req(1, prompt_ids(8), max_tokens=40, stop=stop))
    firsts = [i for i, t in enumerate(full.tokens) if TOK.is_split_first(t)]
    assert firsts and all(full.tokens[i + 1] == full.tokens[i] + 1 for i in firsts[:-1])
    assert full.text == TOK.streamed_text(full.tokens)
    for i in firsts:  # the first token of a split word has no text; the second has the word's
        assert full.deltas[i].text == "" and TOK.split_word(full.tokens[i]) in full.text
    for cut in range(len(full.tokens)):
        sent = "".join(d.text for d in full.deltas[:cut])
        rest = run_one(
            config,
            req(2, prompt_ids(8), max_tokens=40, stop=stop, resume=tuple(full.tokens[:cut])),
        )
        assert full.tokens[:cut] + rest.tokens == full.tokens, cut
        assert sent + rest.text == full.text, cut
