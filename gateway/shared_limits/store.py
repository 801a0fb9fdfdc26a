"""The Redis client and the one way scripts run on it.

`connect` picks the client class from the URL, inside the running loop. `Store.run` gives each
call its own task and deadline: a caller that is cancelled stops waiting (its cancellation
propagates at once) while the call goes on to read its reply, so no connection is ever left
with an unread reply (redis-py #2624); what an abandoned call achieved is handed to the
caller's `on_abandoned`, to be undone. A call past its deadline is cancelled inside redis-py,
which then drops that connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

from redis.exceptions import NoScriptError, RedisClusterException, RedisError

from gateway.shared_limits.target import parse_target

log = logging.getLogger(__name__)
T = TypeVar("T")


class StoreUnavailable(Exception):
    """A call failed, whatever the cause: refused, reset, timed out, a script or slot error."""


UNAVAILABLE: tuple[type[BaseException], ...] = (StoreUnavailable,)
_EXPECTED = (RedisError, RedisClusterException, OSError, TimeoutError)


class Client(Protocol):
    async def execute_command(self, *args: Any, **options: Any) -> Any: ...
    def pipeline(self, transaction: bool = ...) -> Any: ...
    async def aclose(self) -> None: ...


def connect(url: str, timeout_s: float) -> Client:
    """A client for `url`; call it inside the loop that will use it."""
    t = parse_target(url)
    opts: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "username": t.username,
        "password": t.password,
    }
    client: Any
    if t.kind == "single":
        from redis.asyncio import Redis

        del opts["username"], opts["password"]  # in the URL
        client = Redis.from_url(t.url, **opts)
    elif t.kind == "sentinel":
        from redis.asyncio.sentinel import Sentinel

        sentinel = Sentinel(list(t.hosts), socket_timeout=timeout_s)  # type: ignore[no-untyped-call,unused-ignore]
        client = _ThroughSentinel(sentinel.master_for(t.service, db=t.db, **opts), sentinel)
    else:
        from redis.asyncio.cluster import ClusterNode, RedisCluster

        nodes = [ClusterNode(h, p) for h, p in t.hosts]
        client = RedisCluster(startup_nodes=nodes, **opts)
    return client  # type: ignore[no-any-return]


class _ThroughSentinel:
    """The master's client, closing the connections to the sentinels with it."""

    def __init__(self, master: Any, sentinel: Any) -> None:
        self._master = master
        self._sentinel = sentinel

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        return await self._master.execute_command(*args, **options)

    def pipeline(self, transaction: bool = True) -> Any:
        return self._master.pipeline(transaction=transaction)

    async def aclose(self) -> None:
        await self._master.aclose()
        for s in self._sentinel.sentinels:
            await s.aclose()


class Script:
    """A Lua script run by its SHA1, loaded again (EVAL) when the server says NOSCRIPT
    (restarted, flushed, or another Cluster node)."""

    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def __call__(self, client: Client, keys: Sequence[str], args: Sequence[object]) -> Any:
        try:
            return await client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await client.execute_command("EVAL", self.source, len(keys), *keys, *args)

    async def many(
        self, client: Client, calls: Sequence[tuple[Sequence[str], Sequence[object]]]
    ) -> list[Any]:
        """Several runs in one round trip (a pipeline, split by slot on a Cluster); the runs
        the server did not know the script for are sent again with EVAL."""
        async with client.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                pipe.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
            replies = await pipe.execute(raise_on_error=False)
        out = []
        for (keys, args), r in zip(calls, replies, strict=True):
            if isinstance(r, NoScriptError):
                r = await client.execute_command("EVAL", self.source, len(keys), *keys, *args)
            elif isinstance(r, Exception):
                raise r
            out.append(r)
        return out


def _hand_back(on_abandoned: Callable[[asyncio.Task[T]], None], call: asyncio.Task[T]) -> None:
    """`on_abandoned` for a call that ended as its caller was cancelled (the caller's
    cancellation goes on whatever this raises)."""
    try:
        on_abandoned(call)
    except Exception:
        log.exception("redis: handing back what an abandoned call was given failed")


class Store:
    """Runs calls on one client with one deadline each; owns the calls in flight."""

    def __init__(
        self,
        client: Client,
        timeout_s: float,
        observe: Callable[[str, float], None] | None = None,
    ) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self._observe = observe
        self._tasks: set[asyncio.Task[Any]] = set()

    async def run(
        self,
        op: str,
        work: Coroutine[Any, Any, T],
        on_abandoned: Callable[[asyncio.Task[T]], None] | None = None,
    ) -> T:
        """`await work` within the deadline; raises `StoreUnavailable` when it fails. A caller
        cancelled first leaves the call to end on its own: `on_abandoned(call)` runs once it has
        (at once if it just had), and until then the call counts as in flight (`idle`)."""
        task = asyncio.get_running_loop().create_task(self._timed(op, work))
        self._tasks.add(task)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                if on_abandoned is not None:
                    task.add_done_callback(on_abandoned)  # (before `_done`, below)
            elif on_abandoned is not None and not task.cancelled():
                _hand_back(on_abandoned, task)
            raise
        finally:
            if task.done():
                self._done(task)
            else:
                task.add_done_callback(self._done)

    async def _timed(self, op: str, work: Coroutine[Any, Any, T]) -> T:
        start = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_s):
                return await work
        except _EXPECTED as e:
            raise StoreUnavailable(f"redis {op}: {e!r}") from e
        except Exception as e:
            log.warning("redis %s: unexpected failure", op, exc_info=True)
            raise StoreUnavailable(f"redis {op}: {e!r}") from e
        finally:
            if self._observe is not None:
                self._observe(op, time.perf_counter() - start)

    def idle(self) -> bool:
        """No call in flight (an abandoned one's `on_abandoned` has run once this is true)."""
        return not self._tasks

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the caller (if still there) has it too

    async def close(self) -> None:
        """Let the calls in flight end (each within its deadline), then close the client."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=self.timeout_s * 2)
        try:
            async with asyncio.timeout(self.timeout_s * 2):
                await self.client.aclose()
        except _EXPECTED:
            log.info("redis: close failed", exc_info=True)
