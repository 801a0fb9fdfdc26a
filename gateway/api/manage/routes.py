"""The management API's routes; its OpenAPI document (GET /openapi.json) and the admin page
(GET /ui), both open to all: they hold nothing, and the page asks for the master key and calls
the API with it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any, Final

import msgspec
from aiohttp import web

from gateway.api.manage import live
from gateway.api.manage.bodies import (
    DeleteKeys,
    GenerateKey,
    NewTeam,
    RegenerateKey,
    UpdateKey,
    UpdateTeam,
)
from gateway.api.manage.keys import KeyAdmin, guarded
from gateway.api.manage.spend import daily, spend_logs
from gateway.runtime.fleet import Fleet
from gateway.runtime.keyring import Keyring
from gateway.runtime.scheduler import Scheduler

_BODIES: Final = {
    "/key/generate": GenerateKey,
    "/key/update": UpdateKey,
    "/key/delete": DeleteKeys,
    "/key/regenerate": RegenerateKey,
    "/team/new": NewTeam,
    "/team/update": UpdateTeam,
}
_QUERIES: Final = {
    "/key/info": ("key",),
    "/key/list": ("team_id", "return_full_object", "page", "size"),
    "/team/list": (),
    "/team/info": ("team_id",),
    "/spend/logs": ("api_key", "team_id", "request_id", "start_date", "end_date", "format"),
    "/admin/spend/daily": ("days",),
    "/admin/replicas": (),
    "/admin/requests": (),
}


def openapi() -> dict[str, Any]:
    """The management API's OpenAPI 3.1 document, its bodies' schemas from their types."""
    types = list(_BODIES.values())
    ref = "#/components/schemas/{name}"
    schemas, components = msgspec.json.schema_components(types, ref_template=ref)
    bearer: list[dict[str, list[str]]] = [{"masterKey": []}]
    paths: dict[str, Any] = {}
    for (path, _), schema in zip(_BODIES.items(), schemas, strict=True):
        paths[path] = {
            "post": {
                "security": bearer,
                "requestBody": {"content": {"application/json": {"schema": schema}}},
                "responses": {"200": {"description": "OK"}},
            }
        }
    for path, params in _QUERIES.items():
        paths[path] = {
            "get": {
                "security": bearer,
                "parameters": [
                    {"name": p, "in": "query", "schema": {"type": "string"}} for p in params
                ],
                "responses": {"200": {"description": "OK"}},
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {"title": "shardgate management API", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"masterKey": {"type": "http", "scheme": "bearer"}},
        },
    }


def mount(
    app: web.Application,
    keyring: Keyring,
    guard: Callable[[web.Request], None],
    tenants: Callable[[], Collection[str]],
    read: Callable[[web.Request], Awaitable[bytes]],
    fleet: Fleet,
    scheduler: Scheduler,
) -> None:
    KeyAdmin(keyring, guard, tenants, read).routes(app)
    app.router.add_get("/spend/logs", guarded(guard, spend_logs(keyring)))
    app.router.add_get("/admin/spend/daily", guarded(guard, daily(keyring)))
    get_replicas, get_requests = live.handlers(fleet, scheduler, guard)
    app.router.add_get("/admin/replicas", get_replicas)
    app.router.add_get("/admin/requests", get_requests)
    document = openapi()

    async def serve(_: web.Request) -> web.Response:
        return web.json_response(document)

    app.router.add_get("/openapi.json", serve)
    page = (Path(__file__).parent / "page.html").read_bytes()

    async def ui(_: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", charset="utf-8")

    app.router.add_get("/ui", ui)
