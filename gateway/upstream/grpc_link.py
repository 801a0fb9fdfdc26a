"""The link over the gRPC `Engine/Link` stream: a writer task and a reader loop; and the
`Engine/Info` call that tells which port the sidecar's TCP link is on."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import grpc
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import engine_pb2_grpc as pb_grpc
from shardgate.v1.params import PROTOCOL_METADATA, PROTOCOL_VERSION

from gateway import tasks
from gateway.config.schema import LinkTls
from gateway.runtime.flush import FLUSHER
from gateway.upstream import convert, credentials

if TYPE_CHECKING:
    from gateway.upstream.link import EngineLink


# The gateway's link protocol, which the sidecar checks before anything else.
LINK_METADATA = ((PROTOCOL_METADATA, str(PROTOCOL_VERSION)),)

CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),
]


async def link_port(address: str, timeout_s: float, tls: LinkTls | None = None) -> int:
    """The port of the sidecar's TCP link, from its Info (0: it serves none)."""
    async with credentials.channel(address, tls, CHANNEL_OPTIONS) as channel:
        async with asyncio.timeout(timeout_s):
            await channel.channel_ready()
            info = await pb_grpc.EngineStub(channel).Info(pb.InfoRequest())
    return int(info.link_port)


async def run(link: EngineLink) -> None:
    """One session: returns or raises when the stream ends."""
    s = link.settings
    async with credentials.channel(link.address, s.tls, CHANNEL_OPTIONS) as channel:
        async with asyncio.timeout(s.connect_timeout_s):
            await channel.channel_ready()
            call = pb_grpc.EngineStub(channel).Link(metadata=LINK_METADATA)
            first = await call.read()
        if first is grpc.aio.EOF or not first.HasField("info"):
            raise ConnectionError("the sidecar did not announce itself")
        wake = asyncio.Event()
        link.kick = wake.set
        link.announced(first.info, first.load)
        if first.HasField("kv"):
            link.cache_changed(first.kv)
        writer = asyncio.create_task(_write(link, call, wake), name=f"link-{link.name}-writer")
        reader = asyncio.create_task(_read(link, call), name=f"link-{link.name}-reader")
        try:
            # Whichever ends first ends the session: a writer that died takes the link down
            # (its requests migrate) instead of leaving it up, reading, with nothing sent.
            done, _ = await asyncio.wait((reader, writer), return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # raises what ended it
            raise ConnectionError("the link's session ended")
        finally:
            await tasks.stop_all([reader, writer])
            call.cancel()


async def _write(link: EngineLink, call: grpc.aio.StreamStreamCall, wake: asyncio.Event) -> None:
    timeout = link.settings.heartbeat_timeout_s
    while True:
        await wake.wait()
        wake.clear()
        out = link.take_outgoing()
        if out is None:
            continue
        async with asyncio.timeout(timeout):
            submits = [convert.to_submit(*o) for o in out[0]]
            await call.write(pb.LinkRequest(submits=submits, aborts=out[1]))


async def _read(link: EngineLink, call: grpc.aio.StreamStreamCall) -> None:
    loop = asyncio.get_running_loop()
    hb = link.settings.heartbeat_timeout_s
    async with asyncio.timeout(hb) as deadline:
        while True:
            msg = await call.read()
            if msg is grpc.aio.EOF:
                raise ConnectionError("the sidecar closed the link")
            deadline.reschedule(loop.time() + hb)
            if msg.HasField("info"):
                link.reannounce(msg.info)
            if msg.HasField("kv"):
                link.cache_changed(msg.kv)
            link.deliver([convert.from_pb_delta(d) for d in msg.deltas])
            FLUSHER.flush()
            if msg.HasField("load"):
                link.beat(msg.load)
            else:
                link.last_activity = time.monotonic()
