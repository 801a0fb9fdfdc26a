"""The sim engine core: a continuous-batching scheduler over a paged KV cache. Pure: no asyncio,
no clock; `step()` says how long the step would take on the modelled hardware.

Tokens are deterministic: the token at generated position p is drawn from a random stream seeded
by (the original prompt token ids, the sampling seed, the config seed), one 64-bit draw per
position, from the distribution sampler.py defines (its logprobs, and the sampling fields that
change it, are a function of that draw and the tokens so far). A request resumed with the first k
tokens of an earlier run therefore continues exactly as the undisturbed run did, tokens and
logprobs, which is what preemption and migration rely on.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from engine_sidecar.backend import EngineDelta, EngineRequest, ErrorCode, Finish
from engine_sidecar.backends.sim.config import SimConfig
from engine_sidecar.backends.sim.kv import BlockManager
from engine_sidecar.backends.sim.profiles import PROFILES, step_time_s
from engine_sidecar.backends.sim.sampler import BUCKET_SHIFT as _BUCKET_SHIFT
from engine_sidecar.backends.sim.sampler import context, draw_fast, logprobs_at
from engine_sidecar.backends.sim.sequence import DONE, RUNNING, WAITING, SimSeq
from engine_sidecar.backends.sim.tokenizer import SimTokenizer
from engine_sidecar.backends.sim.waiting import WaitingQueue

_LOW32 = 0xFFFFFFFF


@dataclass(slots=True)
class StepResult:
    deltas: list[EngineDelta]
    duration_s: float
    batch_size: int = 0  # sequences that advanced in this step
    prefill_tokens: int = 0  # uncached tokens computed in this step


class SimCore:
    def __init__(self, config: SimConfig, tokenizer: SimTokenizer | None = None) -> None:
        self.config = config
        self.faults = config.faults  # replaced at run time by SimBackend.set_faults
        self.tokenizer = tokenizer or SimTokenizer()
        self.profile = PROFILES[config.profile]
        self.kv = BlockManager(
            config.num_kv_blocks,
            config.block_size,
            config.enable_prefix_caching,
            config.model,
            events=config.kv_events and config.enable_prefix_caching,
        )
        self._seqs: dict[int, SimSeq] = {}
        self._running: dict[int, SimSeq] = {}  # in admission order
        self._waiting = WaitingQueue()
        self._needy: list[SimSeq] = []  # running sequences whose KV blocks are full
        self._arrivals = 0
        self._word_base = self.tokenizer.word_ids[0]
        self._multibyte = config.multibyte_every
        self._word_texts = self.tokenizer.word_texts
        self.preemptions = 0
        self.generated_tokens = 0
        self.steps = 0  # steps that advanced a request (prefill or a delta): engine progress

    @property
    def has_work(self) -> bool:
        return bool(self._running) or len(self._waiting) > 0

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def __contains__(self, key: int) -> bool:
        return key in self._seqs

    # --- requests ------------------------------------------------------------------------
    def add(self, request: EngineRequest, prompt_ids: Sequence[int] | None = None) -> None:
        """Queue a validated request; `prompt_ids` default to request.prompt_token_ids."""
        if request.key in self._seqs:
            raise ValueError(f"duplicate request key {request.key}")
        ids = tuple(prompt_ids if prompt_ids is not None else request.prompt_token_ids or ())
        if not ids:
            raise ValueError("empty prompt")
        self._arrivals += 1
        c = self.config
        seq = SimSeq(
            request,
            ids,
            self._arrivals,
            eos_every=c.eos_every,
            config_seed=c.seed,
            error_rate=self.faults.error_rate,
            tokenizer=self.tokenizer,
        )
        self._seqs[seq.key] = seq
        self._waiting.push(seq)

    def abort(self, key: int) -> None:
        """Forget a request; no delta follows. Unknown keys are ignored."""
        seq = self._seqs.pop(key, None)
        if seq is not None:
            self._drop(seq)

    def abort_all(self) -> list[EngineDelta]:
        """End every unfinished request with finish ABORT; returns their final deltas."""
        seqs = list(self._seqs.values())
        self._seqs.clear()
        out = [self._final(seq, Finish.ABORT) for seq in seqs]
        for seq in seqs:
            self._drop(seq)
        return out

    def _drop(self, seq: SimSeq) -> None:
        state, seq.state = seq.state, DONE
        if state == RUNNING:
            self.kv.free(seq.key)
            del self._running[seq.key]
        elif state == WAITING:
            self._waiting.discarded()

    # --- the step ------------------------------------------------------------------------
    def step(self) -> StepResult:
        """One engine step: schedule, then one token (or the end) for every running sequence."""
        preempted = self._reserve_running()
        prefill = 0 if preempted else self._admit()
        deltas: list[EngineDelta] = []
        finished: list[SimSeq] = []
        needy = self._needy
        texts, base = self._word_texts, self._word_base
        num_words = len(texts)
        bisect, shift = bisect_right, _BUCKET_SHIFT
        new_tokens = 0
        for seq in self._running.values():
            if not seq.fast:
                d = self._advance(seq)
                deltas.append(d)
                if d.finish:
                    finished.append(seq)
                continue
            # The fast path, a plain decode step: first delta sent, no stop strings, no fault.
            gen = seq.generated
            p = len(gen)
            v = seq.rng.getrandbits(64)
            if seq.eos_every and p and (v >> 32) % seq.eos_every == 0:
                deltas.append(self._final(seq, Finish.STOP))
                finished.append(seq)
                continue
            # sampler.draw_fast, inlined
            u = v & _LOW32
            k = seq.buckets[u >> shift]
            if k < 0:
                k = bisect(seq.table, u)
            idx = (v >> 44) % num_words + k
            if idx >= num_words:
                idx -= num_words
            tok = base + idx
            gen.append(tok)
            new_tokens += 1
            if p + 1 >= seq.max_tokens:
                d = EngineDelta(seq.key, [tok], texts[idx], Finish.LENGTH)
                self._fill_usage(seq, d)
                deltas.append(d)
                finished.append(seq)
                continue
            if p + 1 >= seq.gen_room:
                needy.append(seq)
            deltas.append(EngineDelta(seq.key, [tok], texts[idx]))
        self.generated_tokens += new_tokens
        if deltas or prefill:
            self.steps += 1
        batch = len(self._running)
        for seq in finished:
            del self._seqs[seq.key]
            self._drop(seq)
        return StepResult(deltas, step_time_s(self.profile, batch, prefill), batch, prefill)

    def _reserve_running(self) -> bool:
        """A KV slot for each running sequence's next token, preempting when none is left.

        Only sequences whose blocks are full (noted by the previous step in `_needy`) need one.
        """
        if not self._needy:
            return False
        kv = self.kv
        needy, self._needy = self._needy, []
        preempted = False
        for seq in needy:
            if seq.state != RUNNING:
                continue  # finished, aborted or preempted since
            need = seq.prompt_len + len(seq.generated) + 1
            while not kv.append_slot(seq.key, need):
                victim = self._victim()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                seq.gen_room = kv.capacity(seq.key) - seq.prompt_len
        return preempted

    def _victim(self) -> SimSeq:
        """The lowest-priority running sequence, the most recently admitted among equals."""
        best: SimSeq | None = None
        for seq in reversed(self._running.values()):
            if best is None or seq.priority < best.priority:
                best = seq
        assert best is not None
        return best

    def _preempt(self, seq: SimSeq) -> None:
        """vLLM's recompute preemption: drop the KV, keep the tokens, wait again."""
        self.kv.free(seq.key)
        del self._running[seq.key]
        self._waiting.push(seq)
        self.preemptions += 1

    def _admit(self) -> int:
        """Admit waiting sequences; returns the uncached prompt tokens to prefill."""
        kv, running, waiting = self.kv, self._running, self._waiting
        max_seqs = self.config.max_num_seqs
        full_budget = self.config.max_num_batched_tokens
        budget = full_budget
        prefill = 0
        while waiting and len(running) < max_seqs:
            seq = waiting.peek()
            tokens = seq.all_tokens()  # a preempted one recomputes its generated tokens too
            n = len(tokens)
            if kv.enable_caching and seq.hashes_len != n:
                seq.hashes = kv.block_hashes(tokens, seq.salt)
                seq.hashes_len = n
            uncached = n - kv.cached_tokens(n, seq.hashes)
            # A prompt larger than the whole budget may go alone (no chunked prefill here).
            if uncached > budget and budget < full_budget:
                break
            hit = kv.allocate_prompt(seq.key, tokens, lookahead=1, hashes=seq.hashes)
            if hit is None:
                break
            waiting.pop()
            seq.state = RUNNING
            running[seq.key] = seq
            budget -= n - hit
            prefill += n - hit
            seq.gen_room = kv.capacity(seq.key) - seq.prompt_len
            seq.seed_stream()
            if not seq.sent_first:
                seq.cached_tokens = min(hit, seq.prompt_len)
        return prefill

    def _advance(self, seq: SimSeq) -> EngineDelta:
        """One token (or the end) for a running sequence: the general path of step()."""
        gen = seq.generated
        p = len(gen)
        if p >= seq.max_tokens:  # resumed with max_tokens tokens already
            return self._final(seq, Finish.LENGTH)
        if seq.fail and seq.run_tokens:
            return self._final(seq, Finish.ERROR, ErrorCode.INTERNAL, "sim: injected engine error")
        v = seq.rng.getrandbits(64)
        if seq.eos_every and p and p >= seq.min_tokens and (v >> 32) % seq.eos_every == 0:
            return self._final(seq, Finish.STOP)
        sampler = seq.sampler
        idx = draw_fast(v, seq.table, seq.buckets) if sampler is None else sampler.draw(v, gen)
        tok = self._word_base + idx
        text = self._word_texts[idx]
        # A split character's second token is the only one possible after its first.
        forced = bool(self._multibyte and gen) and self.tokenizer.is_split_first(gen[-1])
        if self._multibyte and (sampler is None or sampler.allowed is None):
            tok, text = self._split_word(gen, v, tok, text)  # (allowed ids: never split words)
        lps = None
        if seq.logprobs is not None:
            lp = logprobs_at(context(v), tok, idx, seq.logprobs, self.tokenizer, forced=forced)
            lps = [lp]
        gen.append(tok)
        if sampler is not None:
            sampler.note(tok)
        seq.run_tokens += 1
        self.generated_tokens += 1
        finish = Finish.NONE
        if tok in seq.stop_ids and p + 1 >= seq.min_tokens:
            finish = Finish.STOP  # the stop token counts, its text is not sent (as in vLLM)
            text = seq.take_tail()
        elif seq.stops:
            text, stopped = seq.match_stop(text)
            if stopped:
                finish = Finish.STOP
        if not finish and p + 1 >= seq.max_tokens:
            finish = Finish.LENGTH
            text += seq.take_tail()  # flush what was held back for stop strings
        d = EngineDelta(seq.key, [tok], text, finish, logprobs=lps)
        if finish is Finish.STOP:
            d.stop_sequence = seq.matched
        self._fill_usage(seq, d)
        seq.fast = not (
            seq.stops
            or seq.fail
            or self._multibyte
            or seq.stop_ids
            or seq.min_tokens
            or sampler is not None
            or seq.logprobs is not None
        )
        if not finish and p + 1 >= seq.gen_room:
            self._needy.append(seq)
        return d

    def _split_word(self, gen: list[int], v: int, tok: int, text: str) -> tuple[int, str]:
        """The token at this position where split words are generated: after a split word's
        first token its second, with the word's text; now and then a first token, with no
        text yet (its character is incomplete); otherwise the word drawn."""
        t = self.tokenizer
        if gen and t.is_split_first(gen[-1]):
            return gen[-1] + 1, t.split_word(gen[-1])
        if (v >> 40) % self._multibyte == 0:
            return t.split_first((v & _LOW32) % t.num_split_words), ""
        return tok, text

    def _final(
        self, seq: SimSeq, finish: Finish, code: ErrorCode = ErrorCode.NONE, message: str = ""
    ) -> EngineDelta:
        # An ABORT keeps held-back text unsent: a resumed run emits it (see SimSeq.match_stop).
        text = "" if finish == Finish.ABORT else seq.take_tail()
        d = EngineDelta(seq.key, [], text, finish, error_code=code, error_message=message)
        self._fill_usage(seq, d)
        return d

    @staticmethod
    def _fill_usage(seq: SimSeq, d: EngineDelta) -> None:
        if not seq.sent_first:
            seq.sent_first = True
            d.prompt_tokens = seq.prompt_len
            d.cached_tokens = seq.cached_tokens
        if d.finish:
            d.prompt_tokens = seq.prompt_len
            d.cached_tokens = seq.cached_tokens
            d.completion_tokens = len(seq.generated)
