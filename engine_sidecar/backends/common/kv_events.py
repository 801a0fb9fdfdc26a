"""A vLLM engine's KV events, read from its ZeroMQ publisher, as block names for the mirror.

vLLM publishes what its prefix cache stores and evicts (`kv_events_config` with the `zmq`
publisher; vllm/distributed/kv_events.py): multipart messages `[topic, seq, payload]`, `seq` an
8-byte big-endian counter, `payload` a msgpack `KVEventBatch` of `BlockStored`,
`BlockRemoved` and `AllBlocksCleared`. With a replay endpoint (a ROUTER socket), a subscriber
asks for every batch from a sequence number on; it answers from a bounded buffer and ends with
seq -1.

vLLM's block hashes depend on its hash function and a per-process seed, so they are not the
names the gateway computes. `BlockNamer` names each stored block from its parent's name and
its own token ids (shardgate/v1/kvblocks.py), and remembers vLLM's hash -> name for the blocks
the engine holds, so that removals and children can be named: as many entries as the engine
has cached blocks.

`KvSubscriber` keeps the stream whole: a gap in `seq` is filled from the replay endpoint when
the engine still has it; otherwise (or with no replay endpoint) what the engine holds is no
longer known, and the mirror is cleared (the gateway then learns it again as blocks are
stored; a block whose parent is unknown cannot be named and is left out). A batch newer than
the last one applied (its time) under a number already seen is a restarted engine's: the
mirror is cleared and the numbering starts again there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import msgspec
from shardgate.v1.kvblocks import Prefix, extend, start

from engine_sidecar.kv_mirror import KvMirror

log = logging.getLogger(__name__)

END_SEQ = -1
_SEQ = 8


class BlockStored(msgspec.Struct, tag=True):
    block_hashes: list[Any]
    parent_block_hash: Any
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None


class BlockRemoved(msgspec.Struct, tag=True):
    block_hashes: list[Any]
    medium: str | None = None
    group_idx: int | None = None


class AllBlocksCleared(msgspec.Struct, tag=True):
    pass


class KVEventBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


_DECODE = msgspec.msgpack.Decoder(KVEventBatch)


def _ours(medium: str | None, group_idx: int | None) -> bool:
    """Blocks of the GPU (the engine's own) cache, of its first KV cache group."""
    return medium in (None, "GPU") and group_idx in (None, 0)


class BlockNamer:
    """vLLM's events -> the mirror's stored/removed/cleared, by block name."""

    def __init__(self, model: str, mirror: KvMirror, max_blocks: int = 4_000_000) -> None:
        self.model = model
        self.mirror = mirror
        self.max_blocks = max_blocks
        self._states: dict[Any, Prefix] = {}  # vLLM block hash -> the prefix state it ends
        self._starts: dict[str, Prefix] = {}
        self.unnamed = 0  # blocks stored whose parent was unknown (or keyed by more than LoRA)

    def apply(self, batch: KVEventBatch) -> None:
        for ev in batch.events:
            if isinstance(ev, BlockStored):
                self._stored(ev)
            elif isinstance(ev, BlockRemoved):
                if _ours(ev.medium, ev.group_idx):
                    self.mirror.removed(self._removed(ev.block_hashes))
            else:
                self.cleared()

    def cleared(self) -> None:
        self._states.clear()
        self.mirror.cleared()

    def _removed(self, hashes: Iterable[Any]) -> list[int]:
        states = self._states
        out = []
        for h in hashes:
            state = states.pop(h, None)
            if state is not None:
                out.append(state.name)
        return out

    def _stored(self, ev: BlockStored) -> None:
        if not _ours(ev.medium, ev.group_idx):
            return
        n = len(ev.block_hashes)
        bs = ev.block_size
        if bs != self.mirror.block_size:
            if not self.unnamed:
                log.warning(
                    "KV events: the engine's blocks are of %d tokens, the sidecar announces "
                    "%d: its blocks cannot be named (set the block size it uses)",
                    bs,
                    self.mirror.block_size,
                )
            self.unnamed += n
            return
        if not self._plain(ev) or len(ev.token_ids) < n * bs:
            self.unnamed += n
            return
        if ev.parent_block_hash is None:
            adapter = ev.lora_name or ""
            state = self._starts.get(adapter)
            if state is None:
                state = self._starts[adapter] = start(self.model, adapter)
        else:
            found = self._states.get(ev.parent_block_hash)
            if found is None:
                self.unnamed += n
                return
            state = found
        names = []
        tokens = ev.token_ids
        for i, h in enumerate(ev.block_hashes):
            state = extend(state, tokens[i * bs : (i + 1) * bs])
            self._states[h] = state
            names.append(state.name)
        self.mirror.stored(names)
        if len(self._states) > self.max_blocks:
            self.cleared()

    @staticmethod
    def _plain(ev: BlockStored) -> bool:
        """Keyed by tokens and LoRA only (no multimodal input, cache salt or embeddings, which
        the gateway does not name)."""
        if not ev.extra_keys:
            return True
        lora = (ev.lora_name,) if ev.lora_name else ()
        return all(not k or tuple(k) == lora for k in ev.extra_keys)


class KvSubscriber:
    """Reads one publisher until cancelled; `gaps` counts the gaps it could not fill."""

    def __init__(
        self,
        namer: BlockNamer,
        endpoint: str,
        replay_endpoint: str | None = None,
        topic: str = "",
        timeout_s: float = 5.0,
    ) -> None:
        self.namer = namer
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self.topic = topic.encode()
        self.timeout_s = timeout_s
        self.last_seq: int | None = None
        self.batches = 0  # batches applied
        self.replayed = 0  # ... of them from the replay endpoint
        self.gaps = 0  # gaps not filled: the mirror was cleared
        self.restarts = 0  # the engine restarted (numbered its batches from 0 again)
        self.last_ts = 0.0  # the last applied batch's time (the engine's clock)
        self.connected = asyncio.Event()  # set once subscribed (and caught up, with replay)

    async def run(self) -> None:
        import zmq
        import zmq.asyncio

        ctx = zmq.asyncio.Context.instance()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, self.topic)
        sub.connect(self.endpoint)
        try:
            if self.replay_endpoint is not None:
                # What the engine did before we (re)joined, as far as it still keeps it.
                last = self.last_seq
                await self._catch_up(ctx, 0 if last is None else last + 1, None, last is not None)
            self.connected.set()
            while True:
                # (no deadline: an idle engine publishes nothing; cancellation ends the wait)
                frames = await sub.recv_multipart()
                parsed = _parse(frames)
                if parsed is None:
                    log.warning("KV events: a message that is not [topic, seq, payload]")
                    continue
                seq, payload = parsed
                last = self.last_seq
                if last is not None and seq > last + 1:
                    if self.replay_endpoint is None:
                        self._missed(last + 1, seq)
                    else:
                        await self._catch_up(ctx, last + 1, seq, True)
                self._apply(seq, payload)
        finally:
            sub.close(0)

    async def _catch_up(self, ctx: Any, want: int, until: int | None, known: bool) -> None:
        """Apply the engine's buffered batches from `want` (before `until`). When it no longer
        has `want` (and earlier batches were `known`), what is known is dropped first."""
        got = await self._fetch(ctx, want)
        # (none at all: nothing was published since; the buffer drops its oldest first)
        if known and (got is None or (got and got[0][0] != want)):
            self._missed(want, until)
        for seq, payload in got or ():
            if until is None or seq < until:
                self.replayed += self._apply(seq, payload)

    def restarted(self) -> None:
        """The engine is known to have restarted (its server answered again after dying): its
        cache is empty, and its batches are numbered from 0 again."""
        self.last_seq = None
        self.last_ts = 0.0
        self.restarts += 1
        self.namer.cleared()

    def _missed(self, first: int, until: int | None) -> None:
        log.warning(
            "KV events: batches from %d%s were missed and cannot be replayed: what the engine "
            "caches is learnt again from here",
            first,
            "" if until is None else f" to {until - 1}",
        )
        self.gaps += 1
        self.namer.mirror.gaps += 1
        self.namer.cleared()

    def _apply(self, seq: int, payload: bytes) -> bool:
        try:
            batch = _DECODE.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            log.warning("KV events: batch %d does not decode (%s): cache state dropped", seq, e)
            self.gaps += 1
            self.namer.mirror.gaps += 1
            self.namer.cleared()
            self.last_seq = seq if self.last_seq is None else max(seq, self.last_seq)
            return False
        last = self.last_seq
        if last is not None and seq <= last:
            if batch.ts <= self.last_ts:
                return False  # (applied already: a replay and the stream overlap)
            # A newer batch under an old number: the engine restarted (its numbers start again
            # from 0), with an empty cache.
            log.info("KV events: the engine restarted (batch %d after %d)", seq, last)
            self.restarts += 1
            self.namer.cleared()
        self.last_seq = seq
        self.last_ts = batch.ts
        self.batches += 1
        self.namer.apply(batch)
        return True

    async def _fetch(self, ctx: Any, from_seq: int) -> list[tuple[int, bytes]] | None:
        """The batches the engine still buffers from `from_seq` on (None: no answer)."""
        import zmq

        assert self.replay_endpoint is not None
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.replay_endpoint)
        got: list[tuple[int, bytes]] = []
        try:
            async with asyncio.timeout(self.timeout_s):
                await sock.send_multipart([b"", from_seq.to_bytes(_SEQ, "big")])
                while True:
                    frames = await sock.recv_multipart()
                    parsed = _parse(frames[1:] if frames[:1] == [b""] else frames)
                    if parsed is None:
                        continue
                    if parsed[0] == END_SEQ:
                        return got
                    got.append(parsed)
        except TimeoutError:
            log.warning("KV events: the replay endpoint %s did not answer", self.replay_endpoint)
            return None
        finally:
            sock.close(0)


def _parse(frames: list[bytes]) -> tuple[int, bytes] | None:
    if len(frames) != 3 or len(frames[1]) != _SEQ:
        return None
    return int.from_bytes(frames[1], "big", signed=True), frames[2]
