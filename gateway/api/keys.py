"""Which HTTP requests need a tenant's key, checked before their handler runs.

With tenants configured, every /v1 route needs a key that is a tenant's (or an `anonymous:`
tenant for requests without one), as every /v1 route of `vllm serve --api-key` does, answers
of unknown /v1 paths included; but not the admin key's routes (the LoRA adapters') and not the
routes of `gateway.public_routes`. Handlers that serve a tenant resolve the key again (the
lean path's routes only there). A 401 names the header its protocol sends keys in:
`x-api-key` under /v1/messages (Anthropic's), `Authorization: Bearer` elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.api.anthropic.serving import api_key
from gateway.api.error_shapes import ANTHROPIC_PATH
from gateway.config.schema import GatewaySettings
from gateway.policy.tenants import BEARER, X_API_KEY, Tenants, bearer_key

__all__ = ["ADMIN_ROUTES", "key_check"]

# Routes under /v1 that the admin key guards (gateway/api/http.py: `_admin_caller`).
ADMIN_ROUTES: Final = frozenset({"/v1/load_lora_adapter", "/v1/unload_lora_adapter"})


def _guarded(path: str) -> bool:
    return (path == "/v1" or path.startswith("/v1/")) and path not in ADMIN_ROUTES


def _route(request: web.Request) -> str | None:
    """The route's pattern as `public_routes` names it ("/v1/models/{model}"); None: no route."""
    resource = request.match_info.route.resource
    return None if resource is None else resource.canonical


def key_check(
    tenants: Callable[[], Tenants], settings: Callable[[], GatewaySettings]
) -> Middleware:
    """The middleware (inside the one that shapes errors); `tenants`, `settings`: those in
    force (both reload)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        t = tenants()
        if t.open or not _guarded(path) or _route(request) in settings().public_routes:
            return await handler(request)
        headers = request.headers
        if path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/"):
            t.resolve(api_key(headers), X_API_KEY)
        else:
            t.resolve(bearer_key(headers.get("Authorization")), BEARER)
        return await handler(request)

    return check
