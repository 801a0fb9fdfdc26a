"""One long-lived multiplexed Link to a sidecar, with reconnection.

All requests to the sidecar share the link: the submits and aborts queued since the last write
go out in one message, and the reader hands each delta to its request's collector without
awaiting. No message for `heartbeat_timeout_s` means the sidecar is gone.

The link travels over the sidecar's TCP link when it announces one (`transport: auto`,
gateway/upstream/tcp_link.py) or over the gRPC `Engine/Link` stream (upstream/grpc_link.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from shardgate.v1 import engine_pb2 as pb
from shardgate.v1.params import PROTOCOL_VERSION
from shardgate.v1.wire import WireDelta

from gateway import tasks
from gateway.config.schema import LinkSettings
from gateway.policy.health import reconnect_delay_s
from gateway.types import (
    Delta,
    Finish,
    GatewayError,
    GenerationRequest,
    Unavailable,
)
from gateway.upstream import convert, grpc_link, tcp_link

log = logging.getLogger(__name__)

# A submit waiting for the link: the request, its link-local key, the tokens it resumes after.
Outgoing = tuple[GenerationRequest, int, tuple[int, ...]]


def _nothing() -> None:
    pass


class ProtocolMismatch(ConnectionError):
    """The sidecar speaks another version of the link: its messages would be misread."""


class DeltaTarget(Protocol):
    """Where a request's deltas go: called by the reader, never awaits."""

    def push(self, delta: Delta) -> None: ...

    def fail(self, error: GatewayError) -> None: ...


class LinkListener(Protocol):
    """Told when the link comes up, hears a heartbeat, and goes down (before its requests fail,
    so that they can be resumed elsewhere)."""

    def link_up(self, link: EngineLink) -> None: ...

    def link_beat(self, link: EngineLink) -> None: ...

    def link_down(self, link: EngineLink) -> None: ...


class KvListener(Protocol):
    """Told, from the reader, what the sidecar's engine caches (engine.proto `KvEvents`): its
    announcement (InfoReply.kv_block_size, the models' tokenizers), each change, and the link's
    loss (what it holds is unknown until the next link's snapshot)."""

    def kv_announced(self, sidecar: str, info: pb.InfoReply) -> None: ...

    def kv_events(self, sidecar: str, events: pb.KvEvents) -> None: ...

    def kv_lost(self, sidecar: str) -> None: ...


# How long a sidecar that never served is taken to be starting (its engine loading): failed
# tries meanwhile are INFO, then WARNING (as `shardgate up` waits at most this long too).
STARTING_S = 300.0


def _misconfigured(e: Exception) -> bool:
    """A failure that waiting does not cure: TLS refused, or a peer that broke the protocol."""
    cause = e.__cause__ if isinstance(e, tcp_link.Unreachable) else e
    return isinstance(cause, ssl.SSLError | tcp_link.BadData)


class EngineLink:
    def __init__(self, name: str, address: str, settings: LinkSettings) -> None:
        self.name = name
        self.address = address
        self.settings = settings
        self.info: convert.EndpointInfo | None = None
        self.load: convert.Load | None = None
        self.last_heartbeat = 0.0  # time.monotonic() of the last load report
        self.last_activity = 0.0  # time.monotonic() of the last other message
        self.connected = False
        self.transport = ""  # "tcp" or "grpc": what carries the current session
        self.listener: LinkListener | None = None
        self.kv: KvListener | None = None
        self.streams: dict[int, DeltaTarget] = {}
        self._keys = itertools.count(1)
        self._submits: list[Outgoing] = []
        self._aborts: list[int] = []
        # Set by the transport in use: makes it send what take_outgoing() returns, soon.
        self.kick: Callable[[], None] = _nothing
        self._task: asyncio.Task[None] | None = None
        self._connected_once = asyncio.Event()
        self._started_at = time.monotonic()

    # -- what the router reads -------------------------------------------------------------
    @property
    def routable(self) -> bool:
        return self.connected and self.load is not None and self.load.ready

    @property
    def inflight(self) -> int:
        return len(self.streams)

    def serves(self, model: str) -> bool:
        return self.info is not None and model in self.info.models

    # -- requests ------------------------------------------------------------------------
    def submit(
        self, req: GenerationRequest, target: DeltaTarget, resume: Sequence[int] = ()
    ) -> int:
        """Queue a request (resumed after `resume` tokens) for the writer; returns its key."""
        if not self.connected:
            raise Unavailable(f"sidecar {self.name} is not connected")
        if len(self._submits) >= self.settings.max_outgoing:
            raise Unavailable(f"sidecar {self.name} link is saturated (gateway.link.max_outgoing)")
        key = next(self._keys)
        self.streams[key] = target
        self._submits.append((req, key, tuple(resume)))
        self.kick()
        return key

    def abort(self, key: int) -> None:
        if self.streams.pop(key, None) is not None:
            self.abort_key(key)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        self._started_at = time.monotonic()
        self._task = asyncio.create_task(self._run(), name=f"link-{self.name}")

    async def wait_connected(self, timeout_s: float) -> bool:
        try:
            async with asyncio.timeout(timeout_s):
                await self._connected_once.wait()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        task, self._task = self._task, None
        await tasks.stop(task)

    async def _run(self) -> None:
        rng = random.Random()
        attempt = 0
        while True:
            s = self.settings
            try:
                await self._session()
            except asyncio.CancelledError:
                self._lost("gateway is shutting down", expected=True)
                raise
            except Exception as e:
                self._failed(e)
            attempt = 0 if self.connected else attempt + 1
            self._lost(f"lost the link to sidecar {self.name}")
            delay = reconnect_delay_s(
                attempt, rng, base_s=s.reconnect_min_s, cap_s=s.reconnect_max_s
            )
            await asyncio.sleep(delay)

    def _failed(self, e: Exception) -> None:
        why = str(e) or type(e).__name__
        waited = time.monotonic() - self._started_at
        if self._connected_once.is_set() or waited > STARTING_S or _misconfigured(e):
            log.warning("link %s (%s): %s", self.name, self.address, why)
        else:  # a sidecar serves once its engine has loaded: minutes, for a large one
            log.info(
                "link %s: waiting for sidecar at %s to serve (its engine may still be loading; "
                "last try: %s)",
                self.name,
                self.address,
                why,
            )

    def _lost(self, why: str, expected: bool = False) -> None:
        was = self.connected
        self.connected = False
        self.kick = _nothing
        self._submits.clear()
        self._aborts.clear()
        if was and self.kv is not None:
            self.kv.kv_lost(self.name)
        if was and self.listener is not None:
            self.listener.link_down(self)
        streams, self.streams = self.streams, {}
        for stream in streams.values():
            stream.fail(Unavailable(why))
        if was:
            log.log(
                logging.INFO if expected else logging.WARNING, "link %s down: %s", self.name, why
            )

    async def _session(self) -> None:
        s = self.settings
        port = (
            await grpc_link.link_port(self.address, s.connect_timeout_s, s.tls)
            if s.transport == "auto"
            else 0
        )
        if port:
            self.transport = "tcp"
            try:
                await tcp_link.run(self, self.address.rpartition(":")[0], port)
                return
            except tcp_link.Unreachable as e:
                # gRPC got through, the TCP link does not (a firewall, a port not exposed):
                # the gRPC Link carries the same requests, at a higher cost per message.
                log.warning("link %s: TCP link unreachable (%s); using the gRPC Link", self.name, e)
        self.transport = "grpc"
        await grpc_link.run(self)

    # -- what the transports call ----------------------------------------------------------
    def take_outgoing(self) -> tuple[list[Outgoing], list[int]] | None:
        """The submits (each transport encodes them its way) and aborts queued since the last
        call, or None when there are none."""
        if not self._submits and not self._aborts:
            return None
        out = (self._submits, self._aborts)
        self._submits = []
        self._aborts = []
        return out

    def announced(self, info: pb.InfoReply, load: pb.LoadReport) -> None:
        """The sidecar's first message arrived: the link is up (if it speaks our protocol)."""
        if info.protocol_version != PROTOCOL_VERSION:
            raise ProtocolMismatch(
                f"sidecar {self.name} speaks link protocol {info.protocol_version or 1}, this "
                f"gateway {PROTOCOL_VERSION}: run the same shardgate version on both"
            )
        self.info = convert.endpoint_info(info)
        self.load = convert.load(load)
        self.last_heartbeat = time.monotonic()
        if self.kv is not None:
            self.kv.kv_announced(self.name, info)
        self.connected = True
        self._connected_once.set()
        log.info("link %s up (%s): %s", self.name, self.transport, self.info.sidecar_id)
        if self.listener is not None:
            self.listener.link_up(self)

    def reannounce(self, info: pb.InfoReply) -> None:
        """The sidecar announced itself again on the live link: what it serves changed (a LoRA
        adapter loaded or unloaded). The fleet assembles its replicas again from it."""
        self.info = convert.endpoint_info(info)
        self.last_activity = time.monotonic()
        if self.kv is not None:
            self.kv.kv_announced(self.name, info)
        if self.listener is not None:
            self.listener.link_up(self)

    def cache_changed(self, events: pb.KvEvents) -> None:
        """The sidecar's engine stored or removed KV blocks (or this is the link's snapshot)."""
        if self.kv is not None:
            self.kv.kv_events(self.name, events)

    def beat(self, load: pb.LoadReport) -> None:
        self.load = convert.load(load)
        self.last_heartbeat = time.monotonic()
        if self.listener is not None:
            self.listener.link_beat(self)

    def deliver(self, deltas: Iterable[WireDelta]) -> None:
        """Hand each delta to its request; never awaits. The lists of token ids become the
        requests' own: the transport decoded them fresh. A request whose handling raises is
        failed alone: the link and its other requests go on."""
        streams = self.streams
        it = iter(deltas)
        stream: DeltaTarget | None = None
        while True:
            try:
                for d in it:  # (inline, in one try: the per-token path costs no call here)
                    stream = streams.get(d.key)
                    if stream is None:
                        continue
                    finish = d.finish
                    if not finish and not d.prompt_tokens:
                        if d.logprobs is None and not d.parsed:
                            stream.push(Delta(d.token_ids, d.text))
                        else:
                            stream.push(
                                Delta(d.token_ids, d.text, logprobs=d.logprobs, parsed=d.parsed)
                            )
                        continue
                    if finish:
                        del streams[d.key]
                        if finish == pb.FINISH_ERROR:
                            stream.fail(convert.delta_error(d))
                            continue
                        if finish == pb.FINISH_ABORT:
                            stream.fail(Unavailable("The engine stopped the request."))
                            continue
                    stream.push(
                        Delta(
                            d.token_ids,
                            d.text,
                            Finish(finish),
                            d.prompt_tokens,
                            d.cached_tokens,
                            d.completion_tokens,
                            d.logprobs,
                            d.stop_sequence,
                            d.parsed,
                            d.prompt_logprobs,
                        )
                    )
                return
            except Exception as e:
                if stream is not None:
                    self._failed_on(d.key, stream, e)

    def _failed_on(self, key: int, stream: DeltaTarget, error: Exception) -> None:
        log.error("link %s: request %d failed on its delta: %r", self.name, key, error)
        if self.streams.pop(key, None) is not None:
            self.abort_key(key)
        # The gateway's own failure: not the replica's (no retry, no outlier count against it).
        stream.fail(GatewayError(f"The gateway failed on the engine's output: {error}"))

    def abort_key(self, key: int) -> None:
        """Tell the sidecar to stop `key`, whose stream is already gone from the link."""
        if self.connected:
            self._aborts.append(key)
            self.kick()
