"""Sidecars from a Service's EndpointSlices: list, then watch from the list's resourceVersion.

A full list again on 410 Gone (HTTP or an ERROR event), after any error (with a backoff), and
every `resync_s` whatever the watch says, so a missed event (a dropped DELETE) is repaired by
the next list. Each watch asks the server to end it after `timeoutSeconds` and is bounded by a
deadline past that: a watch that goes silent counts as an error and the slices are listed again.
Every view goes to the sink merged across slices (`slices.members_of`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import aiohttp
import msgspec

from gateway.config.discovery import KubernetesDiscovery
from gateway.discovery.k8s_api import ApiError, Gone, KubeApi
from gateway.discovery.runner import ErrorKind, Sink
from gateway.discovery.slices import EndpointSlice, members_of

_SHORT_WATCH_S = 0.5  # a watch that ends sooner with no event counts as failed (then a backoff)


class SilentWatch(Exception):
    pass


class KubernetesSource:
    def __init__(self, settings: KubernetesDiscovery, api: KubeApi | None = None) -> None:
        self.settings = settings
        self.api = api if api is not None else KubeApi(settings)
        self.slices: dict[str, EndpointSlice] = {}
        self.lists = 0  # full lists made
        self.events = 0  # watch events received

    def _publish(self, sink: Sink) -> None:
        s = self.settings
        sink.synced(members_of(self.slices.values(), s.port_name, s.address_type))

    async def run(self, sink: Sink) -> None:
        s = self.settings
        backoff = s.retry_min_s
        async with self.api:
            while True:
                try:
                    await self._sync(sink)
                    backoff = s.retry_min_s
                    continue
                except Gone as e:
                    sink.failed(ErrorKind.EXPIRED, f"{e}: listing again")
                    continue  # at once: nothing is wrong but the version
                except SilentWatch as e:
                    sink.failed(ErrorKind.SILENT, str(e))
                    continue
                except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as e:
                    sink.failed(ErrorKind.INVALID, str(e))
                except _Failed as e:
                    sink.failed(e.kind, e.detail)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, s.retry_max_s)

    async def _sync(self, sink: Sink) -> None:
        """One list, then watches until the next list is due."""
        s = self.settings
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(s.request_timeout_s):
                listed = await self.api.list()
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as e:
            if isinstance(e, Gone):
                raise
            raise _Failed(ErrorKind.LIST, _describe(e)) from e
        self.lists += 1
        self.slices = {i.metadata.name: i for i in listed.items or ()}
        rv = listed.metadata.resource_version
        self._publish(sink)
        due = loop.time() + s.resync_s
        while (left := due - loop.time()) > 0:
            seconds = max(1, min(s.watch_timeout_s, math.ceil(left)))
            started, events = loop.time(), self.events
            try:
                async with asyncio.timeout(seconds + s.request_timeout_s):
                    rv = await self.api.watch(rv, seconds, self._on_event(sink))
            except TimeoutError as e:
                raise SilentWatch(
                    f"a watch asked to end after {seconds} s was still open "
                    f"{s.request_timeout_s:g} s later"
                ) from e
            except (aiohttp.ClientError, OSError) as e:
                raise _Failed(ErrorKind.WATCH, _describe(e)) from e
            except ApiError as e:
                if isinstance(e, Gone):
                    raise
                raise _Failed(ErrorKind.WATCH, _describe(e)) from e
            if self.events == events and loop.time() - started < _SHORT_WATCH_S:
                # Ended at once with nothing (a proxy cutting it?): not a loop of watches.
                raise _Failed(ErrorKind.WATCH, "a watch ended at once with no event")
            self._publish(sink)  # the watch ended in order: the view is current

    def _on_event(self, sink: Sink) -> Callable[[str, EndpointSlice | None, str], None]:
        def handle(kind: str, obj: EndpointSlice | None, rv: str) -> None:
            self.events += 1
            if obj is None:
                return  # a bookmark: only the version moved
            if kind == "DELETED":
                self.slices.pop(obj.metadata.name, None)
            else:
                self.slices[obj.metadata.name] = obj
            self._publish(sink)

        return handle


class _Failed(Exception):
    def __init__(self, kind: ErrorKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
