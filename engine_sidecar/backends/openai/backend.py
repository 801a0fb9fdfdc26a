"""OpenAIBackend: an engine server that speaks the OpenAI API, behind the Backend protocol.

Each request is one streamed call (stream.py) owned by one task; a StepBatcher gathers the
chunks that arrive in one event-loop iteration into one sink call. Aborting a request cancels
its task, which closes its connection: the server aborts the request. Load comes from the
server's /metrics, health from its /health (monitor.py).
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

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
from engine_sidecar.backends.common.kv_events import BlockNamer, KvSubscriber
from engine_sidecar.backends.common.prompts import Limits, check_request
from engine_sidecar.backends.common.running import end_all
from engine_sidecar.backends.openai.body import (
    CHOSEN_LOGPROBS,
    OPENAI_CAPABILITIES,
    TEMPLATE_CAPABILITIES,
    TRUNCATION,
    VLLM_CAPABILITIES,
)
from engine_sidecar.backends.openai.client import EngineClient, ServerRefused
from engine_sidecar.backends.openai.config import OpenAIConfig
from engine_sidecar.backends.openai.job import make_job
from engine_sidecar.backends.openai.local import make_local, refuse_unserved
from engine_sidecar.backends.openai.monitor import Monitor
from engine_sidecar.backends.openai.process import EngineProcess
from engine_sidecar.backends.openai.start import (
    load_tokenizer,
    served_model,
    takes_logprob_ids,
    takes_token_ids,
    tokenizer_source,
)
from engine_sidecar.backends.openai.stream import RequestStream, Server
from engine_sidecar.backends.openai.tokens import detokenize, prompt_ids, refused
from engine_sidecar.kv_mirror import KvMirror
from gateway import tasks

log = logging.getLogger(__name__)

_CANCEL_GRACE_S = 5.0
_DEFAULT_MAX_MODEL_LEN = 4096


def _limits(c: OpenAIConfig, max_model_len: int) -> Limits:
    """The server applies the chat template controls (and refuses a request's own template
    unless it trusts them: `vllm serve --trust-request-chat-template`)."""
    loras = frozenset(c.loras)
    return Limits(
        c.served_name, max_model_len, loras, templates=True, trust_request_chat_template=True
    )


class OpenAIBackend:
    def __init__(self, config: OpenAIConfig, *, sidecar: str = "") -> None:
        """`sidecar`: the sidecar's name, in errors that name its config keys."""
        self.config = config
        self.sidecar = sidecar
        self._client: EngineClient | None = None
        self._monitor: Monitor | None = None
        self._server: Server | None = None
        self._limits = _limits(config, config.max_model_len or 0)
        self._batcher: StepBatcher | None = None
        self._sink: DeltaSink | None = None
        self._requests: dict[int, tuple[asyncio.Task[None], RequestStream]] = {}
        self._cancelled: set[asyncio.Task[None]] = set()
        self._stopped = False
        self.process: EngineProcess | None = None  # the engine server, where we run it
        self.generated_tokens = 0
        self.steps = 0  # chunks that brought tokens (where the server reports no steps)
        self._tokenizer_name = ""  # the tokenizer a gateway reads (named in Info)
        kv = config.kv_events
        self._kv = KvMirror(kv.block_size) if kv is not None else None
        self.kv_subscriber: KvSubscriber | None = None
        self._kv_task: asyncio.Task[None] | None = None

    # --- Backend -------------------------------------------------------------------------
    def info(self) -> BackendInfo:
        c, s = self.config, self._server
        card = ModelCard(
            c.served_name, self._limits.max_model_len, tuple(sorted(c.loras)), self._tokenizer_name
        )
        extra = {"engine": "openai", "url": c.url}
        token_ids = s is not None and s.token_ids
        extra["token_ids"] = "yes" if token_ids else "no"
        caps = VLLM_CAPABILITIES | TEMPLATE_CAPABILITIES if token_ids else OPENAI_CAPABILITIES
        if token_ids and s is not None and s.tokenizer is not None:
            caps |= TRUNCATION
        if s is not None and s.local is not None:  # (done on the sidecar: local.py)
            caps |= {"tools"} | ({"logprobs"} | CHOSEN_LOGPROBS if s.logprobs else set())
            caps |= {"reasoning"} if s.local.reasoning else set()
        block_size = self._kv.block_size if self._kv is not None else 0
        return BackendInfo("openai", (card,), c.max_num_seqs, extra, caps, block_size)

    @property
    def kv(self) -> KvMirror | None:
        return self._kv

    async def start(self, sink: DeltaSink) -> None:
        if self._client is not None:
            raise RuntimeError("OpenAIBackend already started")
        c = self.config
        client = self._client = EngineClient(c)
        monitor = Monitor(client, c)
        if c.command:
            self.process = EngineProcess(c)
            self.process.start()
        try:
            if not await monitor.wait_ready(c.startup_timeout_s):
                raise RuntimeError(f"the engine server at {c.url} is not healthy")
            model = await served_model(client, c.model)
            probe_s = max(c.first_chunk_timeout_s, c.rpc_timeout_s)  # (a probe is a completion)
            token_ids = await takes_token_ids(client, c.model, probe_s)
            tokenizer = await asyncio.to_thread(load_tokenizer, c, model.root)
            local = (
                await asyncio.to_thread(make_local, c, tokenizer, self.sidecar)
                if token_ids
                else None
            )
            logprobs = local is not None and await takes_logprob_ids(client, c.model, probe_s)
        except BaseException:
            self._client = None
            await client.close()
            if self.process is not None:
                await self.process.stop()
            raise
        max_len = c.max_model_len or model.max_model_len or _DEFAULT_MAX_MODEL_LEN
        self._limits = _limits(c, max_len)
        self._server = Server(
            client, c.model, token_ids, c.priority, tokenizer, local, logprobs, max_len
        )
        self._monitor = monitor
        self._tokenizer_name = tokenizer_source(c, model.root) or ""
        await monitor.scrape()
        monitor.start()
        kv = c.kv_events
        if kv is not None and self._kv is not None:
            namer = BlockNamer(c.served_name, self._kv)
            sub = KvSubscriber(
                namer, kv.endpoint, kv.replay_endpoint, kv.topic, kv.replay_timeout_s
            )
            self.kv_subscriber = sub
            monitor.on_back = sub.restarted  # (its cache died with it)
            self._kv_task = asyncio.create_task(sub.run(), name="openai-kv-events")
        self._sink = sink
        self._batcher = StepBatcher(sink, asyncio.get_running_loop())
        log.info(
            "engine server %s ready: %s, max_model_len %d, token ids %s, tokenizer %s, "
            "tools and logprobs here %s",
            c.url,
            c.model,
            max_len,
            "yes" if token_ids else "no",
            "yes" if tokenizer else "no",
            "yes" if local else "no",
        )

    async def stop(self) -> None:
        self._stopped = True
        requests, self._requests = self._requests, {}
        await end_all(requests, self._cancelled, self._batcher, self._sink, _CANCEL_GRACE_S)
        task, self._kv_task = self._kv_task, None
        await tasks.stop(task)
        if self._monitor is not None:
            await self._monitor.stop()
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        if self.process is not None:
            await self.process.stop()

    def submit(self, request: EngineRequest) -> None:
        server, batcher, monitor = self._server, self._batcher, self._monitor
        if server is None or batcher is None or monitor is None or self._stopped:
            raise RequestError(ErrorCode.UNAVAILABLE, "the openai backend is not running")
        if request.key in self._requests:
            raise RequestError(
                ErrorCode.INVALID_ARGUMENT, f"duplicate request key {request.key}", "key"
            )
        g = request.generation
        refuse_unserved(g, server.local, server.logprobs)
        chat = server.local.begin(g) if server.local is not None else None
        job = make_job(request, self._limits, server.tokenizer, chat)
        stream = RequestStream(server, job, batcher.add, monitor.unreachable)
        if job.max_tokens == 0 and chat is None:  # resumed with all its tokens already
            batcher.add(stream.usage.delta([], "", Finish.LENGTH))
            return
        stream.on_tokens = self._count
        name = f"openai-{request.key}"
        task = asyncio.get_running_loop().create_task(self._run(request.key, stream), name=name)
        self._requests[request.key] = (task, stream)

    def abort(self, key: int) -> None:
        entry = self._requests.pop(key, None)
        if entry is None:
            return
        task = entry[0]
        task.cancel()  # closes the request's connection, and so aborts it on the server
        self._cancelled.add(task)
        task.add_done_callback(self._cancelled.discard)
        if self._batcher is not None:
            self._batcher.discard(key)

    def load(self) -> LoadSnapshot:
        c, monitor = self.config, self._monitor
        inflight = len(self._requests)
        ready = monitor is not None and monitor.alive and not self._stopped
        if monitor is None or not monitor.has_metrics:
            running = min(inflight, c.max_num_seqs)
            return LoadSnapshot(
                running, inflight - running, 0.0, c.max_num_seqs, ready,
                generated_tokens=self.generated_tokens, steps=self.steps,
            )  # fmt: skip
        s = monitor.load
        return LoadSnapshot(
            running=s.running,
            waiting=s.waiting,
            kv_usage=s.kv_usage,
            max_num_seqs=c.max_num_seqs,
            ready=ready,
            preemptions=s.preemptions,
            prefix_hit_rate=s.prefix_hit_rate,
            generated_tokens=s.generated_tokens or self.generated_tokens,
            steps=self.steps if s.steps is None else s.steps,
        )

    def healthy(self) -> bool:
        return self._monitor is None or self._monitor.alive

    # --- Tokenizes (through the server's /tokenize and /detokenize) -------------------------
    async def tokenize(self, request: EngineRequest) -> list[int]:
        server = self._running()
        check_request(request, self._limits)
        field = "messages" if request.messages is not None else "prompt"
        try:
            return await prompt_ids(server.client, server.model, request)
        except ServerRefused as e:
            raise refused(e, field) from None
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise RequestError(ErrorCode.UNAVAILABLE, f"the engine server: {e}") from None

    async def detokenize(self, model: str, ids: list[int]) -> str:
        server = self._running()
        if model != self._limits.model:
            raise RequestError(ErrorCode.NOT_FOUND, f"The model `{model}` does not exist.", "model")
        return await detokenize(server.client, server.model, ids)

    # --- requests ------------------------------------------------------------------------
    def _running(self) -> Server:
        if self._server is None or self._stopped:
            raise RequestError(ErrorCode.UNAVAILABLE, "the openai backend is not running")
        return self._server

    def _count(self, n: int) -> None:
        if n:
            self.steps += 1
            self.generated_tokens += n

    async def _run(self, key: int, stream: RequestStream) -> None:
        try:
            await stream.run()
        finally:
            entry = self._requests.get(key)
            if entry is not None and entry[0] is asyncio.current_task():
                del self._requests[key]
