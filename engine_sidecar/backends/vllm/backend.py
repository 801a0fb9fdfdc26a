"""VllmBackend: vLLM's AsyncLLM in the sidecar process, behind the Backend protocol.

Each request is one task that iterates `AsyncLLM.generate` (prompt as token ids, outputs as
deltas). vLLM's output handler hands one engine step's outputs to all those tasks in the same
event-loop iteration; a StepBatcher turns them back into one sink call. Cancelling a task aborts
its request in the engine (vLLM's generate() does so on cancellation). A resumed request's text
is the sidecar's own, made from the token ids (text.py): vLLM's would repeat or lose some.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from typing import Any

import msgspec
from shardgate.v1.params import TEMPLATE_FIELDS
from vllm.lora.request import LoRARequest

from engine_sidecar.backend import (
    BackendInfo,
    DeltaSink,
    EngineRequest,
    ErrorCode,
    Finish,
    LoadSnapshot,
    ModelCard,
    RequestError,
)
from engine_sidecar.backends.common.batcher import StepBatcher
from engine_sidecar.backends.common.detokenizer import IncrementalDetokenizer
from engine_sidecar.backends.common.prompts import (
    Limits,
    Prepared,
    detokenize,
    prepare,
    tokenize,
)
from engine_sidecar.backends.common.tokenizer import HfTokenizer
from engine_sidecar.backends.common.usage import Usage
from engine_sidecar.backends.vllm.args import resolve_model
from engine_sidecar.backends.vllm.config import VllmConfig
from engine_sidecar.backends.vllm.engine import (
    Engine,
    EngineFactory,
    build_async_llm,
    start_engine,
)
from engine_sidecar.backends.vllm.errors import error_delta
from engine_sidecar.backends.vllm.logprobs import TokenTexts
from engine_sidecar.backends.vllm.loras import Adapters
from engine_sidecar.backends.vllm.outputs import to_delta
from engine_sidecar.backends.vllm.sampling import (
    CAPABILITIES,
    engine_priority,
    sampling_params,
)
from engine_sidecar.backends.vllm.text import own_text
from engine_sidecar.backends.vllm.tools import ChatParse, ChatParsers, template_tools
from engine_sidecar.kv_mirror import KvMirror

log = logging.getLogger(__name__)

# How long stop() waits for cancelled requests to leave the engine.
_CANCEL_GRACE_S = 5.0


class VllmBackend:
    def __init__(
        self,
        config: VllmConfig,
        *,
        rank: int = 0,
        world_size: int = 1,
        engine: Engine | None = None,
        engine_factory: EngineFactory = build_async_llm,
        sidecar: str = "",
    ) -> None:
        """`engine`: an engine started elsewhere, shared; stop() leaves it running. `sidecar`:
        the sidecar's name, in errors that name its config keys."""
        self.config = config
        self.sidecar = sidecar
        self._rank = rank
        self._world_size = world_size
        self._factory = engine_factory
        self._shared = engine
        self._adapters = Adapters(config)
        self.engine: Engine | None = None
        self._limits = Limits(
            config.served_name,
            config.max_model_len or 0,
            templates=True,
            trust_request_chat_template=config.trust_request_chat_template,
        )
        self._max_num_seqs = config.max_num_seqs
        self._batcher: StepBatcher | None = None
        self._sink: DeltaSink | None = None
        self._requests: dict[int, tuple[asyncio.Task[None], Usage]] = {}
        self._cancelled: set[asyncio.Task[None]] = set()
        self._stopped = False
        self._parsers: ChatParsers | None = None
        # Where a gateway reads the engine's tokenizer (the model's directory, or its own).
        self._tokenizer_path = ""

    # --- Backend -------------------------------------------------------------------------
    def info(self) -> BackendInfo:
        c = self.config
        loras = tuple(sorted(self._adapters.names()))
        engine = self.engine
        kv = engine.kv if engine is not None else None
        card = ModelCard(c.served_name, self._limits.max_model_len, loras, self._tokenizer_path)
        extra = {"engine": "vllm", "tp": str(c.tensor_parallel_size)}
        extra["pp"] = str(c.pipeline_parallel_size)
        caps = (
            CAPABILITIES
            | {"tools", *TEMPLATE_FIELDS}
            | ({"reasoning"} if c.reasoning_parser else set())
        )
        block_size = kv.block_size if kv is not None else 0
        return BackendInfo("vllm", (card,), self._max_num_seqs, extra, caps, block_size)

    @property
    def kv(self) -> KvMirror | None:
        engine = self.engine
        return engine.kv if engine is not None else None

    async def start(self, sink: DeltaSink) -> None:
        if self.engine is not None:
            raise RuntimeError("VllmBackend already started")
        c = self.config
        engine = self._shared or await start_engine(
            c, rank=self._rank, world_size=self._world_size, factory=self._factory
        )
        self.engine = engine
        self._tokenizer_path = c.tokenizer or resolve_model(c)[0]
        model_config = getattr(engine.llm, "model_config", None)
        self._parsers = ChatParsers(c, engine.tokenizer.raw, model_config, sidecar=self.sidecar)
        max_len = engine.max_model_len
        self._limits = Limits(
            c.served_name,
            max_len,
            self._adapters.names(),
            templates=True,
            trust_request_chat_template=c.trust_request_chat_template,
        )
        self._max_num_seqs = engine.max_num_seqs
        self._sink = sink
        self._batcher = StepBatcher(sink, asyncio.get_running_loop())
        log.info("vLLM engine ready: %s, max_model_len %d", self.config.served_name, max_len)

    async def stop(self) -> None:
        self._stopped = True
        requests, self._requests = self._requests, {}
        tasks = [task for task, _ in requests.values()]
        for task in tasks:
            task.cancel()
        pending = tasks + list(self._cancelled)
        if pending:
            await asyncio.wait(pending, timeout=_CANCEL_GRACE_S)
        if self._batcher is not None:
            self._batcher.flush()
        finals = [usage.delta([], "", Finish.ABORT) for _, usage in requests.values()]
        if finals and self._sink is not None:
            self._sink(finals)
        engine, self.engine = self.engine, None
        if engine is not None and engine is not self._shared:
            engine.shutdown(self.config.shutdown_timeout_s)

    def submit(self, request: EngineRequest) -> None:
        p, chat = self._validate(request)
        assert self._batcher is not None
        usage = Usage(request.key, len(p.prompt_ids), p.resumed)
        if chat is not None:
            self._start_parse(chat, request, p)
        if p.max_tokens == 0:  # resumed with all its tokens already
            d = usage.delta([], "", Finish.LENGTH)
            if chat is not None:
                d.parsed = chat.feed("", [], True)
            self._batcher.add(d)
            return
        lora = self._adapters.acquire(request.lora)  # (held until the request's task ends)
        task = asyncio.get_running_loop().create_task(
            self._generate(request, p, usage, chat, lora), name=f"vllm-{request.key}"
        )
        task.add_done_callback(lambda _: self._adapters.release(lora))
        self._requests[request.key] = (task, usage)

    def abort(self, key: int) -> None:
        entry = self._requests.pop(key, None)
        if entry is None:
            return
        task = entry[0]
        task.cancel()  # generate() aborts the request in the engine
        self._cancelled.add(task)
        task.add_done_callback(self._cancelled.discard)
        if self._batcher is not None:
            self._batcher.discard(key)

    def load(self) -> LoadSnapshot:
        if self.engine is None:
            return LoadSnapshot(0, 0, 0.0, self._max_num_seqs, ready=False)
        s = self.engine.state
        return LoadSnapshot(
            running=s.running,
            waiting=s.waiting,
            kv_usage=s.kv_usage,
            max_num_seqs=self._max_num_seqs,
            ready=self.engine is not None and not self._stopped and self.healthy(),
            preemptions=s.preemptions,
            prefix_hit_rate=s.prefix_hit_rate,
            generated_tokens=s.generated_tokens,
            steps=s.steps,
        )

    def healthy(self) -> bool:
        engine = self.engine
        return engine is None or not engine.errored

    async def load_lora(self, name: str, path: str) -> None:
        await self._adapters.load(self._running_llm(), name, path)
        self._limits = replace(self._limits, loras=self._adapters.names())

    async def unload_lora(self, name: str) -> None:
        self._limits = replace(self._limits, loras=self._limits.loras - {name})
        await self._adapters.unload(self._running_llm(), name)
        self._limits = replace(self._limits, loras=self._adapters.names())

    def _running_llm(self) -> Any:
        engine = self.engine
        if engine is None or self._stopped or engine.errored:
            raise RequestError(ErrorCode.UNAVAILABLE, "the vLLM engine is not running")
        return engine.llm

    # --- requests ------------------------------------------------------------------------
    def _tokenizer(self) -> HfTokenizer:
        engine = self.engine
        if engine is None or self._stopped:
            raise RequestError(ErrorCode.UNAVAILABLE, "the vLLM engine is not running")
        return engine.tokenizer

    def tokenize(self, r: EngineRequest) -> list[int]:
        return tokenize(r, self._limits, self._tokenizer(), template_tools(r.generation))

    def detokenize(self, model: str, ids: list[int]) -> str:
        # (special tokens kept: vLLM's /detokenize decodes as its tokenizer does by default)
        return detokenize(model, ids, self._limits, self._tokenizer().keeping_special_tokens())

    def _validate(self, r: EngineRequest) -> tuple[Prepared, ChatParse | None]:
        engine = self.engine
        if engine is None or self._stopped:
            raise RequestError(ErrorCode.UNAVAILABLE, "the vLLM engine is not running")
        if engine.errored:
            raise RequestError(ErrorCode.UNAVAILABLE, "the vLLM engine is dead")
        if r.key in self._requests:
            raise RequestError(ErrorCode.INVALID_ARGUMENT, f"duplicate request key {r.key}", "key")
        assert self._parsers is not None
        chat = self._parsers.begin(r.generation)
        tools = template_tools(r.generation, chat)
        return prepare(r, self._limits, engine.tokenizer, tools), chat

    def _start_parse(self, chat: ChatParse, r: EngineRequest, p: Prepared) -> None:
        """The parse starts after the prompt and the tokens resumed (each with its text)."""
        assert self.engine is not None
        tokenizer = self.engine.tokenizer
        if chat.request.skip_special_tokens is False or not r.sampling.skip_special_tokens:
            tokenizer = tokenizer.keeping_special_tokens()
        detok = IncrementalDetokenizer(tokenizer, p.prompt_ids)
        chat.start(p.prompt_ids, [(detok.add((t,)), t) for t in r.resume_token_ids])

    async def _generate(
        self,
        r: EngineRequest,
        p: Prepared,
        usage: Usage,
        chat: ChatParse | None,
        lora: LoRARequest | None,
    ) -> None:
        from vllm.inputs import TokensPrompt

        batcher, engine = self._batcher, self.engine
        assert batcher is not None and engine is not None
        priority = engine_priority(r.priority, self.config.scheduling_policy)
        try:
            sampling = r.sampling
            if chat is not None and chat.request.skip_special_tokens is False:
                # The parser needs its markers' text (vLLM's adjust_request says so).
                sampling = msgspec.structs.replace(sampling, skip_special_tokens=False)
            text = own_text(engine.tokenizer, p.prompt_ids, r.resume_token_ids, sampling)
            logprob_texts = None
            if text is not None and sampling.logprobs is not None:
                logprob_texts = TokenTexts(engine.tokenizer.raw, r.resume_token_ids)
            params = sampling_params(
                sampling, p.max_tokens, detokenize=text is None, resumed=len(r.resume_token_ids)
            )
            if chat is not None and chat.structured_outputs is not None:
                params.structured_outputs = chat.structured_outputs  # the tool choice's grammar
            outputs = engine.llm.generate(
                TokensPrompt(prompt_token_ids=p.engine_ids),
                params,
                f"{r.request_id or 'req'}-{r.key}",
                priority=priority,
                lora_request=lora,
            )
            raw = engine.tokenizer.raw  # (prompt logprobs' texts)
            # Closing the generator early (a stop string of our own text) aborts the request.
            async with contextlib.aclosing(outputs):
                async for out in outputs:
                    delta = to_delta(usage, out, text, logprob_texts, raw)
                    if chat is not None:
                        delta.parsed = chat.feed(delta.text, delta.token_ids, bool(delta.finish))
                    batcher.add(delta)
                    if delta.finish and not out.finished:
                        break
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if r.key in self._requests:
                structured = r.sampling.structured
                field = structured.field if structured else ""
                if chat is not None and chat.structured_outputs is not None:
                    field = "tools"
                batcher.add(error_delta(usage, e, field))
        finally:
            entry = self._requests.get(r.key)
            if entry is not None and entry[0] is asyncio.current_task():
                del self._requests[r.key]
