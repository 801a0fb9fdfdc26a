"""A small Kubernetes API server for discovery tests: EndpointSlices over the real list/watch
protocol, on 127.0.0.1, with ways to misbehave.

GET /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=... lists
(EndpointSliceList with metadata.resourceVersion); with watch=1 it streams newline-delimited
JSON events {type, object} after the given resourceVersion until timeoutSeconds, as the API
server does. Misbehaviours: `expire()` (a watch from an older version gets 410: an ERROR event
with a Status of code 410, or HTTP 410 with `gone_as_http`), `silent` (watches accept and send
nothing, ever), `cut` (watches end at once), `drop_deletes` (a slice deleted with no DELETED
event), `stop()` (the server down: connections refused) and `start()` again on the same port.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

SERVICE_LABEL = "kubernetes.io/service-name"


def endpoint(
    ip: str, pod: str, ready: bool = True, serving: bool = True, terminating: bool = False
) -> dict[str, Any]:
    return {
        "addresses": [ip],
        "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
        "targetRef": {"kind": "Pod", "name": pod, "namespace": "shard"},
        "nodeName": "node-1",
    }


class FakeKubeApi:
    def __init__(self, namespace: str, service: str, token: str = "") -> None:
        self.namespace = namespace
        self.service = service
        self.token = token
        self.slices: dict[str, dict[str, Any]] = {}
        self.rv = 100
        self.log: list[tuple[int, str, dict[str, Any]]] = []  # (rv, type, object)
        self.oldest = 0  # versions below this are compacted: 410
        self.gone_as_http = False
        self.silent = False
        self.cut = False  # watches end at once, with no event
        self.drop_deletes = False
        self.lists = 0
        self.watches = 0
        self.watched_from: list[str] = []  # the resourceVersion each watch asked for
        self.listed_at: list[str] = []  # the resourceVersion each list answered
        self.unauthorized = 0
        self.open_watches = 0
        self.port = 0
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._errors: list[dict[str, Any]] = []  # ERROR events for the watches open now

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        app = web.Application()
        path = f"/apis/discovery.k8s.io/v1/namespaces/{self.namespace}/endpointslices"
        app.router.add_get(path, self._get)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # -- changing the slices -----------------------------------------------------------------
    async def put(self, name: str, port: int, *endpoints: dict[str, Any]) -> None:
        self.rv += 1
        kind = "MODIFIED" if name in self.slices else "ADDED"
        obj = {
            "kind": "EndpointSlice",
            "apiVersion": "discovery.k8s.io/v1",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "resourceVersion": str(self.rv),
                "labels": {SERVICE_LABEL: self.service},
            },
            "addressType": "IPv4",
            "endpoints": list(endpoints) or None,
            "ports": [{"name": "grpc", "port": port, "protocol": "TCP"}],
        }
        self.slices[name] = obj
        await self._event(kind, obj)

    async def delete(self, name: str) -> None:
        self.rv += 1
        obj = self.slices.pop(name)
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        if not self.drop_deletes:
            await self._event("DELETED", obj)

    async def expire(self, notify_open: bool = True) -> None:
        """Compact the history: versions up to now are gone (410); with `notify_open`, the
        watches open now get an ERROR event with code 410 too (else they end in order)."""
        self.oldest = self.rv + 1
        if notify_open:
            self._errors.append(_status(410, "Expired", "too old resource version"))
        async with self._changed:
            self._changed.notify_all()

    async def _event(self, kind: str, obj: dict[str, Any]) -> None:
        self.log.append((self.rv, kind, obj))
        async with self._changed:
            self._changed.notify_all()

    # -- serving -----------------------------------------------------------------------------
    async def _get(self, request: web.Request) -> web.StreamResponse:
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            self.unauthorized += 1
            return web.json_response(_status(401, "Unauthorized", "no token"), status=401)
        if request.query.get("labelSelector") != f"{SERVICE_LABEL}={self.service}":
            return web.json_response(_status(400, "BadRequest", "selector"), status=400)
        if request.query.get("watch") in ("1", "true"):
            return await self._watch(request)
        self.lists += 1
        self.listed_at.append(str(self.rv))
        items = sorted(self.slices.values(), key=lambda s: str(s["metadata"]["name"]))
        return web.json_response(
            {
                "kind": "EndpointSliceList",
                "apiVersion": "discovery.k8s.io/v1",
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            }
        )

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        self.watches += 1
        self.watched_from.append(request.query.get("resourceVersion", ""))
        since = int(request.query.get("resourceVersion") or self.rv)
        timeout_s = float(request.query.get("timeoutSeconds", "1800"))
        if since < self.oldest and self.gone_as_http:
            return web.json_response(_status(410, "Gone", "too old resource version"), status=410)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        self.open_watches += 1
        try:
            if self.silent:
                await asyncio.Event().wait()  # accepts, then never a byte and never an end
            if self.cut:
                return resp
            if since < self.oldest:
                await _send(resp, "ERROR", _status(410, "Expired", "too old resource version"))
                return resp
            errors_seen = len(self._errors)
            loop = asyncio.get_running_loop()
            end = loop.time() + timeout_s
            while True:
                for rv, kind, obj in self.log:
                    if rv > since:
                        await _send(resp, kind, obj)
                        since = rv
                if len(self._errors) > errors_seen:
                    await _send(resp, "ERROR", self._errors[-1])
                    return resp
                left = end - loop.time()
                if left <= 0:
                    return resp  # timeoutSeconds: the server ends the watch
                async with self._changed:
                    try:
                        await asyncio.wait_for(self._changed.wait(), left)
                    except TimeoutError:
                        pass
        finally:
            self.open_watches -= 1


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


async def _send(resp: web.StreamResponse, kind: str, obj: dict[str, Any]) -> None:
    await resp.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
