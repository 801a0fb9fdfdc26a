"""The two calls of the Kubernetes API that discovery makes: list and watch EndpointSlices.

Spoken over aiohttp with the in-cluster config (the service account's token, read again for
every request since projected tokens rotate; its CA; KUBERNETES_SERVICE_HOST/PORT). A watch is
one long GET whose body is newline-delimited JSON events `{type, object}`; the caller bounds it
with a deadline past its `timeoutSeconds`, so a watch that goes silent is noticed. HTTP 410 and
an ERROR event whose Status has code 410 both raise `Gone`: the caller lists again.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from pathlib import Path

import aiohttp
import msgspec

from gateway.config.discovery import SERVICE_ACCOUNT, KubernetesDiscovery
from gateway.discovery.slices import EndpointSlice, EndpointSliceList, Status, WatchEvent

_MAX_BODY = 64 << 20  # a list's body at most
_MAX_LINE = 16 << 20  # one watch event at most


class ApiError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}" if message else str(code))
        self.code = code


class Gone(ApiError):
    """410: the resource version asked for is too old."""


def in_cluster_url() -> str:
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ValueError(
            "discovery.kubernetes: KUBERNETES_SERVICE_HOST is not set (not in a cluster?); "
            "set api_url"
        )
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def own_namespace(settings: KubernetesDiscovery) -> str:
    if settings.namespace:
        return settings.namespace
    try:
        return Path(SERVICE_ACCOUNT, "namespace").read_text().strip() or "default"
    except OSError:
        return "default"


def _status(body: bytes) -> Status:
    try:
        return msgspec.json.decode(body, type=Status)
    except msgspec.DecodeError:
        return Status(message=body[:200].decode(errors="replace"))


class KubeApi:
    """EndpointSlices of one namespace and label selector. Open and close it on the loop."""

    def __init__(self, settings: KubernetesDiscovery) -> None:
        self.base = (settings.api_url or in_cluster_url()).rstrip("/")
        self.namespace = own_namespace(settings)
        self.selector = f"kubernetes.io/service-name={settings.service}"
        self._settings = settings
        self._session: aiohttp.ClientSession | None = None
        self._ssl: ssl.SSLContext | bool = True
        if self.base.startswith("https:"):
            ca = Path(settings.ca_file)
            self._ssl = ssl.create_default_context(cafile=str(ca) if ca.exists() else None)

    @property
    def url(self) -> str:
        return f"{self.base}/apis/discovery.k8s.io/v1/namespaces/{self.namespace}/endpointslices"

    async def __aenter__(self) -> KubeApi:
        timeout = aiohttp.ClientTimeout(total=None, connect=self._settings.request_timeout_s)
        self._session = aiohttp.ClientSession(timeout=timeout, raise_for_status=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        try:
            token = Path(self._settings.token_file).read_text().strip()
        except OSError:
            token = ""
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _get(self, params: dict[str, str]) -> aiohttp.client._RequestContextManager:
        assert self._session is not None, "open the KubeApi first"
        params = {"labelSelector": self.selector, **params}
        return self._session.get(self.url, params=params, headers=self._headers(), ssl=self._ssl)

    @staticmethod
    async def _refuse(r: aiohttp.ClientResponse) -> None:
        if r.status == 200:
            return
        st = _status(await r.content.read(64 << 10))
        cls = Gone if r.status == 410 else ApiError
        raise cls(r.status, st.message or st.reason)

    async def list(self) -> EndpointSliceList:
        """The slices and the list's resourceVersion (the caller bounds it with a deadline)."""
        async with self._get({}) as r:
            await self._refuse(r)
            body = bytearray()
            async for chunk in r.content.iter_any():
                body += chunk
                if len(body) > _MAX_BODY:
                    raise ValueError(f"an EndpointSlice list over {_MAX_BODY} bytes")
            return msgspec.json.decode(body, type=EndpointSliceList)

    async def watch(
        self,
        resource_version: str,
        timeout_seconds: int,
        on_event: Callable[[str, EndpointSlice | None, str], None],
    ) -> str:
        """Watch from `resource_version` until the server ends the watch; each event is handed
        to `on_event(type, slice or None for a bookmark, resourceVersion)`. Returns the last
        resourceVersion seen. The caller bounds it with a deadline past `timeout_seconds`."""
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
            "allowWatchBookmarks": "true",
        }
        rv = resource_version
        async with self._get(params) as r:
            await self._refuse(r)
            buf = bytearray()
            async for chunk in r.content.iter_any():
                buf += chunk
                while (end := buf.find(b"\n")) >= 0:
                    line, buf = bytes(buf[:end]), buf[end + 1 :]
                    if line.strip():
                        rv = _event(line, rv, on_event)
                if len(buf) > _MAX_LINE:
                    raise ValueError(f"a watch event over {_MAX_LINE} bytes")
            if buf.strip():
                rv = _event(bytes(buf), rv, on_event)
        return rv


def _event(line: bytes, rv: str, on_event: Callable[[str, EndpointSlice | None, str], None]) -> str:
    ev = msgspec.json.decode(line, type=WatchEvent)
    if ev.type == "ERROR":
        st = msgspec.json.decode(ev.object, type=Status)
        cls = Gone if st.code == 410 else ApiError
        raise cls(st.code, st.message or st.reason)
    obj = msgspec.json.decode(ev.object, type=EndpointSlice)
    rv = obj.metadata.resource_version or rv
    if ev.type == "BOOKMARK":
        on_event(ev.type, None, rv)
    elif ev.type in ("ADDED", "MODIFIED", "DELETED"):
        on_event(ev.type, obj, rv)
    else:
        raise ValueError(f"unknown watch event type {ev.type!r}")
    return rv
