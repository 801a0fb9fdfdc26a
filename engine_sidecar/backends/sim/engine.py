"""SimBackend: the sim engine core driven by one asyncio task, behind the Backend protocol."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import replace

from engine_sidecar.backend import (
    BackendInfo,
    DeltaSink,
    EngineDelta,
    EngineRequest,
    ErrorCode,
    LoadSnapshot,
    ModelCard,
    RequestError,
)
from engine_sidecar.backends.common.prompts import Limits, detokenize, prepare, tokenize
from engine_sidecar.backends.sim.config import SimConfig, SimFaults
from engine_sidecar.backends.sim.core import SimCore
from engine_sidecar.backends.sim.sampler import refusal
from engine_sidecar.backends.sim.tokenizer import SimTokenizer
from engine_sidecar.kv_mirror import KvMirror

CRASH_EXIT_CODE = 17
# Behind the pacing deadline by more than this, the loop stops trying to catch up.
_MAX_LAG_S = 0.05


# The optional sampling fields a deterministic simulator honours (sampler.py).
CAPABILITIES = frozenset(
    {
        "stop_token_ids",
        "min_tokens",
        "logprobs",
        "logit_bias",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "allowed_token_ids",
        "bad_words",
        "min_p",
    }
)


class SimBackend:
    """A CPU model of a vLLM-like engine (see core.py); `exit_fn` is the crash fault's os._exit."""

    def __init__(self, config: SimConfig, *, exit_fn: Callable[[int], object] = os._exit) -> None:
        self.config = config
        self.tokenizer = SimTokenizer()
        self.core = SimCore(config, self.tokenizer)
        self._exit = exit_fn
        self._limits = Limits(config.model, config.max_model_len, frozenset(config.loras))
        self._sink: DeltaSink | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopped = False
        self._died = False  # the loop ended with an exception (kept after stop())
        self.hung = False
        self._unhang = asyncio.Event()
        self._cold = config.first_step_delay_s > 0  # its first step is still to be delayed
        self._pending: list[EngineDelta] = []  # the running step's output, until it has run
        self._kv = KvMirror(config.block_size) if self.core.kv.records_events else None

    # --- Backend -------------------------------------------------------------------------
    def info(self) -> BackendInfo:
        c = self.config
        card = ModelCard(
            c.model, c.max_model_len, tuple(sorted(self._limits.loras)), tokenizer="sim"
        )
        return BackendInfo(
            backend="sim",
            models=(card,),
            max_num_seqs=c.max_num_seqs,
            extra={"profile": c.profile, "block_size": str(c.block_size)},
            capabilities=CAPABILITIES,
            kv_block_size=c.block_size if self._kv is not None else 0,
        )

    @property
    def kv(self) -> KvMirror | None:
        return self._kv

    async def load_lora(self, name: str, path: str) -> None:
        """Adapters are simulated by name (the path is not read): a request naming one runs as
        the base model's would, in a prefix cache of its own."""
        self._limits = replace(self._limits, loras=self._limits.loras | {name})

    async def unload_lora(self, name: str) -> None:
        self._limits = replace(self._limits, loras=self._limits.loras - {name})

    async def start(self, sink: DeltaSink) -> None:
        if self._task is not None:
            raise RuntimeError("SimBackend already started")
        self._sink = sink
        self._stopped = False
        self._task = asyncio.create_task(self._run(sink), name="sim-engine")

    async def stop(self) -> None:
        task, self._task = self._task, None
        self._stopped = True
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
            except Exception:
                self._died = True  # the loop had died already; healthy() says so
        # The step that was running when stopped: its output first (its finished requests are
        # no longer the core's), then every unfinished request's end.
        pending, self._pending = self._pending, []
        deltas = pending + self.core.abort_all()
        if deltas and self._sink is not None:
            self._sink(deltas)

    def submit(self, request: EngineRequest) -> None:
        prompt_ids = self._validate(request)
        self.core.add(request, prompt_ids)
        self._wake.set()

    def abort(self, key: int) -> None:
        self.core.abort(key)

    def load(self) -> LoadSnapshot:
        core = self.core
        return LoadSnapshot(
            running=core.num_running,
            waiting=core.num_waiting,
            kv_usage=core.kv.usage(),
            max_num_seqs=self.config.max_num_seqs,
            ready=self._task is not None and not self._stopped and self.healthy(),
            preemptions=core.preemptions,
            prefix_hit_rate=core.kv.prefix_hit_rate(),
            generated_tokens=core.generated_tokens,
            steps=core.steps,
        )

    def healthy(self) -> bool:
        task = self._task
        if task is not None and task.done() and not task.cancelled():
            self._died = self._died or task.exception() is not None
        return not self._died

    # --- validation ----------------------------------------------------------------------
    def _validate(self, r: EngineRequest) -> list[int]:
        """Checks a request and returns its prompt token ids, or raises RequestError: the
        checks and messages every engine that takes token ids shares (common/prompts.py)."""
        if self._stopped:
            raise RequestError(ErrorCode.UNAVAILABLE, "the sim engine is stopped")
        if r.key in self.core:
            raise RequestError(ErrorCode.INVALID_ARGUMENT, f"duplicate request key {r.key}", "key")
        ids = prepare(r, self._limits, self.tokenizer).prompt_ids
        refused = refusal(r.sampling)
        if refused is not None:
            raise RequestError(ErrorCode.INVALID_ARGUMENT, refused[1], refused[0])
        return ids

    def tokenize(self, r: EngineRequest) -> list[int]:
        return tokenize(r, self._limits, self.tokenizer)

    def detokenize(self, model: str, ids: list[int]) -> str:
        return detokenize(model, ids, self._limits, self.tokenizer)

    # --- the loop ------------------------------------------------------------------------
    def set_faults(self, faults: SimFaults) -> None:
        """Change the injected faults of a running engine (drills)."""
        self.core.faults = faults
        if self.hung and faults.hang_after_tokens is None:
            self.hung = False
            self._unhang.set()

    @property
    def faults(self) -> SimFaults:
        return self.core.faults

    async def _run(self, sink: DeltaSink) -> None:
        core = self.core
        clock = time.monotonic
        deadline = clock()
        while True:
            if self.hung:
                self._unhang.clear()
                await self._unhang.wait()  # stalls until the fault is cleared or stop()
                deadline = clock()
                continue
            if not core.has_work:
                self._wake.clear()
                await self._wake.wait()
                deadline = clock()
                continue
            if self._cold:
                self._cold = False
                await asyncio.sleep(self.config.first_step_delay_s)
                deadline = clock()
                continue  # (the work may have gone meanwhile)
            result = core.step()
            faults = core.faults
            # A step's output (its tokens, the blocks its prefill cached) exists once the step
            # has run: it is delivered after the step's time, so a prefill shows in the TTFT.
            deadline += result.duration_s + faults.slow_token_s
            delay = deadline - clock()
            if delay > 0:
                self._pending = result.deltas
                await asyncio.sleep(delay)
                self._pending = []
            elif delay < -_MAX_LAG_S:
                deadline = clock()
            if self._kv is not None:
                events = core.kv.take_events()
                if events:
                    self._kv.apply(events)
            if result.deltas:
                sink(result.deltas)
            crash_after = faults.crash_after_tokens
            hang_after = faults.hang_after_tokens
            generated = core.generated_tokens
            if crash_after is not None and generated >= crash_after:
                self._exit(CRASH_EXIT_CODE)
            if hang_after is not None and generated >= hang_after:
                self.hung = True
            if delay <= 0:
                await asyncio.sleep(0)
