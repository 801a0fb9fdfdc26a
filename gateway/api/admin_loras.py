"""POST /v1/load_lora_adapter and /v1/unload_lora_adapter: vLLM's bodies and answers, admin-only.

An adapter is loaded on the replicas of its base model (all of them, or those named in
`replicas`) and unloaded from every replica that holds it. The answer comes once each replica
has loaded (or unloaded) it AND the fleet has its new announcement: the next request naming the
adapter is routed by it. Where some replicas fail, the answer is the first failure; those that
succeeded keep the change (the router goes by what each replica announces).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import msgspec
from aiohttp import web

from gateway.api.body import read_body
from gateway.api.openai.validation import decode_json
from gateway.config.schema import GatewaySettings
from gateway.policy.routing.snapshot import Replica
from gateway.runtime.fleet import Fleet
from gateway.types import GatewayError, InvalidRequest, ModelNotFound, Unavailable
from gateway.upstream import loras

_POLL_S = 0.01  # how often the fleet is read while its replicas' announcements arrive


class LoadBody(msgspec.Struct, kw_only=True):
    lora_name: str = ""
    lora_path: str = ""
    load_inplace: bool = False
    # The base model (default: the only one served) and a choice of its replicas (by name).
    model: str | None = None
    replicas: list[str] | None = None


class UnloadBody(msgspec.Struct, kw_only=True):
    lora_name: str = ""
    lora_int_id: int | None = None
    replicas: list[str] | None = None


_LOAD: Final = msgspec.json.Decoder(LoadBody)
_UNLOAD: Final = msgspec.json.Decoder(UnloadBody)
_EXPECTED: Final = {
    "lora_name": "must be a string",
    "lora_path": "must be a string",
    "load_inplace": "must be a boolean",
    "model": "must be a string",
    "replicas": "must be an array of replica names",
    "lora_int_id": "must be an integer",
}


def holds(replica: Replica | None, name: str) -> bool:
    return replica is not None and any(name in names for names in replica.loras.values())


class LoraAdmin:
    def __init__(
        self,
        fleet: Fleet,
        settings: Callable[[], GatewaySettings],
        authorize: Callable[[web.Request], None],
    ) -> None:
        self._fleet = fleet
        self._settings = settings
        self._authorize = authorize

    async def _body(self, request: web.Request) -> bytes:
        self._authorize(request)
        s = self._settings()
        return await read_body(request, s.max_body_bytes, s.client_body_timeout_s)

    async def load(self, request: web.Request) -> web.Response:
        req = decode_json(_LOAD, await self._body(request), _EXPECTED)
        name = req.lora_name
        if not name or not req.lora_path:
            message = "Both 'lora_name' and 'lora_path' must be provided."
            raise InvalidRequest(message, "lora_name" if not name else "lora_path")
        if req.load_inplace:
            raise InvalidRequest("load_inplace is not supported.", "load_inplace")
        if name in self._fleet.seen_models:
            message = f"The lora adapter '{name}' conflicts with a served base model."
            raise InvalidRequest(message, "lora_name")
        model = self._base_model(req.model)
        parent = self._fleet.adapters.get(name, model)
        if parent != model:
            message = f"The lora adapter '{name}' is loaded already, as an adapter of {parent}."
            raise InvalidRequest(message, "lora_name")
        chosen = self._chosen(self._fleet.assembly.pool(model), req.replicas)
        targets = self._connected(chosen, req.replicas is not None)
        path = req.lora_path
        await self._apply(
            targets,
            lambda r, t: loras.load(r.name, r.address, name, path, t, self._settings().link.tls),
            lambda r: holds(r, name),
        )
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def unload(self, request: web.Request) -> web.Response:
        req = decode_json(_UNLOAD, await self._body(request), _EXPECTED)
        name = req.lora_name
        if not name:
            message = "'lora_name' needs to be provided to unload a LoRA adapter."
            raise InvalidRequest(message, "lora_name")
        if req.lora_int_id is not None:
            raise InvalidRequest("lora_int_id is not supported.", "lora_int_id")
        holders = [r for r in self._fleet.assembly.replicas if holds(r, name)]
        holders = self._chosen(holders, req.replicas)
        if not holders:
            raise ModelNotFound(f"The lora adapter '{name}' cannot be found.", "lora_name")
        await self._apply(
            self._connected(holders, req.replicas is not None),
            lambda r, t: loras.unload(r.name, r.address, name, t, self._settings().link.tls),
            lambda r: not holds(r, name),
        )
        return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")

    def _base_model(self, model: str | None) -> str:
        served = self._fleet.seen_models
        if model is None:
            if len(served) != 1:
                raise InvalidRequest(
                    f"'model' must name the base model: this gateway serves {len(served)} models.",
                    "model",
                )
            return next(iter(served))
        if model not in served:
            raise ModelNotFound(f"The model `{model}` does not exist.", "model")
        return model

    @staticmethod
    def _chosen(replicas: Sequence[Replica], names: list[str] | None) -> list[Replica]:
        if names is None:
            return list(replicas)
        by_name = {r.name: r for r in replicas}
        unknown = sorted(set(names) - set(by_name))
        if unknown:
            raise InvalidRequest(f"No such replica here: {', '.join(unknown)}.", "replicas")
        return [by_name[n] for n in dict.fromkeys(names)]

    def _connected(self, replicas: list[Replica], named: bool) -> list[Replica]:
        """The replicas whose head is connected now. One that is not is left out (it serves
        no adapter loaded while it was away), unless the caller named it."""
        out = []
        for r in replicas:
            head = self._fleet.by_name.get(r.head)
            if head is not None and head.connected:
                out.append(r)
            elif named:
                raise Unavailable(f"Replica {r.name} is not connected: try again later.")
        if not out:
            raise Unavailable("No replica for the change is connected: try again later.")
        return out

    async def _apply(
        self,
        targets: list[Replica],
        change: Callable[[Replica, float], Awaitable[None]],
        shown: Callable[[Replica | None], bool],
    ) -> None:
        """Make the change on every target at once; wait until the fleet shows it on each one
        that made it; then raise the first failure, if any."""
        timeout_s = self._settings().lora_admin_timeout_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        results = await asyncio.gather(
            *(change(r, timeout_s) for r in targets),
            return_exceptions=True,
        )
        errors = [e for e in results if isinstance(e, BaseException)]
        for e in errors:
            if not isinstance(e, GatewayError):
                raise e
        done = [r.name for r, res in zip(targets, results, strict=True) if res is None]
        while not all(shown(self._fleet.assembly.by_name.get(n)) for n in done):
            if loop.time() >= deadline:
                raise Unavailable("The replicas did not announce the change in time.")
            await asyncio.sleep(_POLL_S)
        if errors:
            raise errors[0]
