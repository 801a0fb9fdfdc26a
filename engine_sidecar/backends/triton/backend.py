"""TritonBackend: a decoupled LLM model on Triton Inference Server, behind the Backend protocol.

Each request is one ModelStreamInfer call owned by one task; a StepBatcher gathers the responses
that arrive in one event-loop iteration into one sink call. Aborting a request cancels its call,
which cancels the request on Triton. Load is the sidecar's own in-flight count against
`max_num_seqs` plus Triton's statistics; health is the server's and the model's readiness.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

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
from engine_sidecar.backends.common.prompts import Limits
from engine_sidecar.backends.common.running import end_all
from engine_sidecar.backends.common.tokenizer import HfTokenizer
from engine_sidecar.backends.tiny_model import TINY_MODEL_NAME, ensure_tiny_model
from engine_sidecar.backends.triton.client import TritonClient
from engine_sidecar.backends.triton.config import TritonConfig
from engine_sidecar.backends.triton.job import Convention
from engine_sidecar.backends.triton.monitor import Monitor
from engine_sidecar.backends.triton.stream import RequestStream
from engine_sidecar.backends.triton.trtllm_convention import CAPABILITIES as TRTLLM_CAPABILITIES
from engine_sidecar.backends.triton.trtllm_convention import TrtllmConvention
from engine_sidecar.backends.triton.vllm_convention import CAPABILITIES as VLLM_CAPABILITIES
from engine_sidecar.backends.triton.vllm_convention import VllmConvention

log = logging.getLogger(__name__)

_CANCEL_GRACE_S = 5.0


def load_tokenizer(config: TritonConfig) -> HfTokenizer | None:
    name = config.tokenizer
    if not name:
        return None
    if name == TINY_MODEL_NAME:
        where = Path(config.tiny_model_dir).expanduser() if config.tiny_model_dir else None
        name = str(ensure_tiny_model(where))
    return HfTokenizer.from_pretrained(name)


def make_convention(config: TritonConfig, tokenizer: HfTokenizer | None) -> Convention:
    limits = Limits(config.served_name, config.max_model_len, frozenset(config.loras))
    if config.convention == "trtllm":
        assert tokenizer is not None  # TritonConfig requires one
        return TrtllmConvention(limits, tokenizer)
    return VllmConvention(limits, tokenizer, additional_outputs=config.additional_outputs)


class TritonBackend:
    def __init__(self, config: TritonConfig) -> None:
        self.config = config
        self._client: TritonClient | None = None
        self._monitor: Monitor | None = None
        self._convention: Convention | None = None
        self._batcher: StepBatcher | None = None
        self._sink: DeltaSink | None = None
        self._requests: dict[int, tuple[asyncio.Task[None], RequestStream]] = {}
        self._cancelled: set[asyncio.Task[None]] = set()
        self._stopped = False
        self.generated_tokens = 0
        # Responses streamed back with outputs: Triton's engine steps, as far as KServe v2
        # shows them (each one advanced a request).
        self.steps = 0

    # --- Backend -------------------------------------------------------------------------
    def info(self) -> BackendInfo:
        c = self.config
        card = ModelCard(c.served_name, c.max_model_len, tuple(sorted(c.loras)))
        extra = {"engine": "triton", "convention": c.convention, "url": c.url}
        # What the convention sends (each convention's CAPABILITIES).
        caps = VLLM_CAPABILITIES if c.convention == "vllm" else TRTLLM_CAPABILITIES
        return BackendInfo("triton", (card,), c.max_num_seqs, extra, caps)

    async def start(self, sink: DeltaSink) -> None:
        if self._client is not None:
            raise RuntimeError("TritonBackend already started")
        c = self.config
        tokenizer = await asyncio.to_thread(load_tokenizer, c)
        self._convention = make_convention(c, tokenizer)
        self._client = TritonClient(c.url, c.model, c.model_version, c.rpc_timeout_s)
        self._monitor = Monitor(self._client, c)
        if not await self._monitor.wait_ready(c.startup_timeout_s):
            await self._client.close()
            self._client = None
            raise RuntimeError(f"Triton model {c.model} at {c.url} is not ready")
        self._monitor.start()
        self._sink = sink
        self._batcher = StepBatcher(sink, asyncio.get_running_loop())
        log.info("Triton model %s at %s ready (%s convention)", c.model, c.url, c.convention)

    async def stop(self) -> None:
        self._stopped = True
        requests, self._requests = self._requests, {}
        await end_all(requests, self._cancelled, self._batcher, self._sink, _CANCEL_GRACE_S)
        if self._monitor is not None:
            await self._monitor.stop()
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def submit(self, request: EngineRequest) -> None:
        client, convention, batcher = self._client, self._convention, self._batcher
        if client is None or convention is None or batcher is None or self._stopped:
            raise RequestError(ErrorCode.UNAVAILABLE, "the Triton backend is not running")
        if request.key in self._requests:
            raise RequestError(
                ErrorCode.INVALID_ARGUMENT, f"duplicate request key {request.key}", "key"
            )
        job = convention.prepare(request)
        stream = RequestStream(client, self.config, job, convention.reader(job), batcher.add)
        if job.max_tokens == 0:  # resumed with all its tokens already
            batcher.add(stream.usage.delta([], "", Finish.LENGTH))
            return
        stream.on_tokens = self._count
        pb = client.request(f"{request.request_id or 'req'}-{request.key}", job.inputs)
        self._set_scheduling(pb, request.priority)
        task = asyncio.get_running_loop().create_task(self._run(request.key, stream, pb))
        self._requests[request.key] = (task, stream)

    def abort(self, key: int) -> None:
        entry = self._requests.pop(key, None)
        if entry is None:
            return
        task = entry[0]
        task.cancel()  # cancels the call, and so the request on Triton
        self._cancelled.add(task)
        task.add_done_callback(self._cancelled.discard)
        if self._batcher is not None:
            self._batcher.discard(key)

    def load(self) -> LoadSnapshot:
        c = self.config
        inflight = len(self._requests)
        running = min(inflight, c.max_num_seqs)
        monitor = self._monitor
        return LoadSnapshot(
            running=running,
            waiting=inflight - running,
            kv_usage=0.0,  # Triton reports no KV cache use over KServe v2
            max_num_seqs=c.max_num_seqs,
            ready=monitor is not None and monitor.ready and not self._stopped,
            prefix_hit_rate=monitor.cache_hit_rate if monitor is not None else 0.0,
            generated_tokens=self.generated_tokens,
            steps=self.steps,
        )

    def healthy(self) -> bool:
        return self._monitor is None or self._monitor.alive

    # --- requests ------------------------------------------------------------------------
    def _set_scheduling(self, pb: Any, priority: int) -> None:
        """Our classes run HIGHER first; Triton runs level 1 first, down to `priority_levels`."""
        levels = self.config.priority_levels
        if levels:
            level = min(max(levels - priority, 1), levels)
            pb.parameters["priority"].uint64_param = level
        timeout_us = int(self.config.request_timeout_s * 1_000_000)
        pb.parameters["timeout"].int64_param = timeout_us

    def _count(self, n: int) -> None:
        self.steps += 1
        self.generated_tokens += n

    async def _run(self, key: int, stream: RequestStream, pb: Any) -> None:
        try:
            await stream.run(pb)
        finally:
            entry = self._requests.get(key)
            if entry is not None and entry[0] is asyncio.current_task():
                del self._requests[key]
