"""The aiohttp binding: routes, request ids, and errors as OpenAI JSON."""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec
from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway.api.admin_loras import LoraAdmin
from gateway.api.aio_exchange import AioExchange, response_of
from gateway.api.anthropic.count_tokens import CountTokens
from gateway.api.anthropic.serving import AnthropicServing
from gateway.api.body import read_body, too_large
from gateway.api.error_shapes import ErrorShape, error_shape
from gateway.api.forward import WORKER_HEADER, Forwarder
from gateway.api.grpc_forward import PATH as GRPC_RESUME_PATH
from gateway.api.http_errors import ClosingError
from gateway.api.keys import key_check
from gateway.api.manage.routes import mount
from gateway.api.openai import models_body, protocol
from gateway.api.openai.resume import Resume
from gateway.api.openai.serving import OpenAIServing
from gateway.api.openai.tokenize import Tokenizing
from gateway.api.replies import error_parts, request_id
from gateway.api.responses.serving import ResponsesServing
from gateway.config.schema import Config, GatewaySettings
from gateway.config.store import secret
from gateway.observability.metrics import GatewayMetrics
from gateway.policy.tenants import bearer_key
from gateway.runtime.fleet import Fleet
from gateway.runtime.service import Service
from gateway.streams.hub import Streams
from gateway.streams.owner import RESPONSE, STREAM
from gateway.types import Forbidden, GatewayError, ModelNotFound, Unauthorized

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

REQUEST_ID = web.RequestKey("request_id", str)

_HTTP_TYPES = {
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
}


def error_response(err: GatewayError, rid: str, shape: ErrorShape | None = None) -> web.Response:
    status, headers, body = error_parts(err, rid, shape)
    resp = web.Response(
        status=status,
        body=body,
        content_type="application/json",
        headers=headers,
    )
    if isinstance(err, ClosingError):
        resp.force_close()
    return resp


def redacted(config: Config) -> Any:
    """The config as JSON data, API keys masked."""
    data = msgspec.to_builtins(config)
    for tenant in data.get("tenants", []):
        tenant["keys"] = ["***"] * len(tenant.get("keys", []))
    if data.get("gateway", {}).get("admin_key"):
        data["gateway"]["admin_key"] = "***"
    return data


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    rid = request_id(request.headers.get("x-request-id"))
    request[REQUEST_ID] = rid
    shape = error_shape(request.path)  # OpenAI's, or Anthropic's on its routes
    try:
        resp = await handler(request)
    except GatewayError as e:
        return error_response(e, rid, shape)
    except web.HTTPRequestEntityTooLarge:
        return error_response(too_large(None, request.client_max_size), rid, shape)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        err = GatewayError(e.reason)
        err.status = e.status
        err.type = _HTTP_TYPES.get(e.status, "invalid_request_error")
        return error_response(err, rid, shape)
    except Exception:
        log.exception("request %s failed", rid)
        return error_response(GatewayError("Internal error."), rid, shape)
    return resp


async def request_id_header(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer names its request's id as its head leaves, a stream's as a reply's (the
    middleware's errors and a sibling's relayed answer name it already)."""
    rid = request.get(REQUEST_ID)
    if rid is not None and "x-request-id" not in response.headers:
        response.headers["x-request-id"] = rid


class HttpApi:
    def __init__(
        self,
        fleet: Fleet,
        service: Service,
        metrics: GatewayMetrics,
        settings: GatewaySettings,
        gateway: Gateway | None = None,
        streams: Streams | None = None,
    ) -> None:
        self._gateway = gateway
        self._fleet = fleet
        self._service = service
        self._metrics = metrics
        self.settings = settings
        self.resume = (
            Resume(streams, service.tenants, settings.keepalive_s) if streams is not None else None
        )
        self.tokenizing = Tokenizing(fleet, service, settings)
        self.serving = OpenAIServing(service, settings, self.tokenizing, streams)
        self.anthropic = AnthropicServing(service, settings)
        self.counting = CountTokens(self.tokenizing)
        self.loras = LoraAdmin(fleet, lambda: self.settings, self._admin_caller)
        self.responses = ResponsesServing(service, settings, streams)
        self._started = int(time.time())
        # --workers N: what a sibling keeps goes to it (set before app() is built).
        self.forwarder: Forwarder | None = None

    def app(self) -> web.Application:
        keys = key_check(lambda: self._service.tenants, lambda: self.settings)
        app = web.Application(
            middlewares=[openai_errors, keys], client_max_size=self.settings.max_body_bytes
        )
        app.on_response_prepare.append(request_id_header)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        if self.resume is not None:
            reattach = self._owned("stream_id", STREAM, self.resume.handle)
            app.router.add_get("/v1/streams/{stream_id}", reattach)
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_post("/v1/responses", self.create_response)
        retrieve = self._owned("response_id", RESPONSE, self.responses.retrieve)
        cancel = self._owned("response_id", RESPONSE, self.responses.cancel)
        app.router.add_get("/v1/responses/{response_id}", retrieve)
        app.router.add_post("/v1/responses/{response_id}/cancel", cancel)
        if self.forwarder is not None:
            app.on_response_prepare.append(self._worker_header)
        app.router.add_post("/v1/messages/count_tokens", self.counting.count_tokens)
        app.router.add_post("/tokenize", self.tokenizing.tokenize)
        app.router.add_post("/detokenize", self.tokenizing.detokenize)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{model:.+}", self.model)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/health", self.health)  # (vllm serve's: clients probe it)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/admin/reload", self.admin_reload)
        app.router.add_get("/admin/config", self.admin_config)
        app.router.add_post("/v1/load_lora_adapter", self.loras.load)
        app.router.add_post("/v1/unload_lora_adapter", self.loras.unload)
        keyring = self._service.keyring
        if keyring is not None:
            names = lambda: self._service.tenants.names()  # noqa: E731 (those in force)
            sched = self._service.scheduler
            mount(app, keyring, self._admin_caller, names, self._read, self._fleet, sched)
        return app

    async def _read(self, request: web.Request) -> bytes:
        s = self.settings
        return await read_body(request, s.max_body_bytes, s.client_body_timeout_s)

    # -- --workers N: what a sibling keeps is answered by it -------------------------------
    def _owned(self, param: str, prefix: str, local: Handler) -> Handler:
        """`local`, or (under --workers N) the owner's answer when the stream or response
        that the path's `param` names (an id of `prefix`) is a sibling's (api/forward.py)."""
        fwd = self.forwarder
        if fwd is None:
            return local

        async def handler(request: web.Request) -> web.StreamResponse:
            owner = fwd.sibling(request.match_info[param], prefix)
            if owner is None:
                return await local(request)
            return await fwd.relay(request, owner, request[REQUEST_ID])

        return handler

    async def _worker_header(self, request: web.Request, response: web.StreamResponse) -> None:
        """Which worker took the connection (under --workers N)."""
        if self.forwarder is not None:
            response.headers[WORKER_HEADER] = str(self.forwarder.index)

    def sibling_app(self, grpc_resume: Handler) -> web.Application:
        """What this worker answers its siblings on its Unix socket (under --workers N): the
        reattaches, retrieves and cancels of what it keeps, and gRPC Resumes of its streams
        (`grpc_resume`), each checked and answered here as a client's would be; and its own
        readiness, which the parent waits for from every worker before it says it is up."""
        app = web.Application(middlewares=[openai_errors])
        app.on_response_prepare.append(request_id_header)
        if self.resume is not None:
            app.router.add_get("/v1/streams/{stream_id}", self.resume.handle)
        app.router.add_get("/v1/responses/{response_id}", self.responses.retrieve)
        app.router.add_post("/v1/responses/{response_id}/cancel", self.responses.cancel)
        app.router.add_get(GRPC_RESUME_PATH, grpc_resume)
        app.router.add_get("/readyz", self.readyz)  # this worker's own, for the parent
        return app

    def _check_length(self, request: web.Request) -> None:
        length = request.content_length
        if length is not None and length > self.settings.max_body_bytes:
            raise too_large(length, self.settings.max_body_bytes)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self._check_length(request)
        answer = await self.serving.generate(
            AioExchange(request), request[REQUEST_ID], protocol.decode_chat, "chat"
        )
        return response_of(answer)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        self._check_length(request)
        answer = await self.serving.generate(
            AioExchange(request), request[REQUEST_ID], protocol.decode_completion, "completion"
        )
        return response_of(answer)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        self._check_length(request)
        return await self.anthropic.messages(request, request[REQUEST_ID])

    async def create_response(self, request: web.Request) -> web.StreamResponse:
        self._check_length(request)
        return await self.responses.create(request, request[REQUEST_ID])

    def _listed(self) -> dict[str, models_body.ModelEntry]:
        """Every model, then every LoRA adapter (with its parent), by name."""
        models = self._fleet.models()
        out: dict[str, models_body.ModelEntry] = {
            name: (name, max_len, None) for name, (max_len, _) in sorted(models.items())
        }
        for name, parent in sorted(self._fleet.adapters.items()):
            if name not in out:
                out[name] = (name, models.get(parent, (0, 0))[0], parent)
        return out

    async def models(self, request: web.Request) -> web.Response:
        listed = list(self._listed().values())
        return web.Response(
            body=models_body.encode_models(listed, self._started), content_type="application/json"
        )

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        found = self._listed().get(name)
        if found is None:
            raise ModelNotFound(f"The model `{name}` does not exist.", "model")
        return web.Response(
            body=models_body.encode_model(found, self._started), content_type="application/json"
        )

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def health(self, request: web.Request) -> web.Response:
        """As `vllm serve` answers it: 200, no body."""
        return web.Response(status=200)

    def own_metrics(self) -> bytes:
        """This process's exposition, replica states read now."""
        now = time.monotonic()
        outliers = self._service.scheduler.supervisor.outliers
        names = [r.name for r in self._fleet.assembly.replicas]
        for name in names:
            self._metrics.known_replica(name)
        states = self._fleet.replica_states(lambda name: outliers.is_ejected(name, now))
        for address, state in states.items():
            self._metrics.set_replica_state(address, state)
        self._metrics.keep_replicas(states.keys(), names)
        return self._metrics.render()[0]

    async def metrics(self, request: web.Request) -> web.Response:
        """Under --workers, the totals of every worker (gateway/observability/merge.py)."""
        siblings = self._gateway.siblings if self._gateway is not None else None
        body = self.own_metrics() if siblings is None else await siblings.scrape()
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def readyz(self, request: web.Request) -> web.Response:
        """Ready: config loaded, not draining, and every model pool has a routable replica."""
        models = self._fleet.models()
        draining = self._gateway is not None and self._gateway.draining
        ready = (
            not draining and bool(models) and all(replicas > 0 for _, replicas in models.values())
        )
        body = {
            "ready": ready,
            "draining": draining,
            "models": {n: r for n, (_, r) in models.items()},
        }
        return web.json_response(body, status=200 if ready else 503)

    # -- admin -------------------------------------------------------------------------------
    def _admin_caller(self, request: web.Request) -> None:
        """Raises 401 (or 403) unless the caller may use the admin API: the `admin:` master
        key or `gateway.admin_key`, or with neither set, a caller on loopback."""
        key = self.settings.admin_key
        admin = self._gateway.config.admin if self._gateway is not None else None
        if admin is not None:
            key = secret(admin.master_key)
        if key is not None:
            given = bearer_key(request.headers.get("Authorization")) or ""
            if not hmac.compare_digest(given.encode(), key.encode()):
                raise Unauthorized("The admin API needs the admin key.")
        else:
            peer = request.remote or ""
            if peer not in ("127.0.0.1", "::1"):
                raise Forbidden("The admin API is open to loopback only (no admin_key set).")

    def _admin(self, request: web.Request) -> Gateway:
        self._admin_caller(request)
        if self._gateway is None or self._gateway.reloader is None:
            raise ModelNotFound("This gateway was started without a config file.")
        return self._gateway

    async def admin_reload(self, request: web.Request) -> web.Response:
        gw = self._admin(request)
        assert gw.reloader is not None
        ok = gw.reloader.reload("admin")
        st = gw.reloader.status
        body = {"ok": ok, "version": st.version, "hash": st.hash}
        if not ok:
            body["error"] = st.last_error
        return web.json_response(body, status=200 if ok else 400)

    async def admin_config(self, request: web.Request) -> web.Response:
        gw = self._admin(request)
        assert gw.reloader is not None
        st = gw.reloader.status
        return web.json_response(
            {
                "path": st.path,
                "version": st.version,
                "hash": st.hash,
                "loaded_at": st.loaded_at,
                "last_error": st.last_error,
                "last_error_at": st.last_error_at,
                "config": redacted(gw.config),
            }
        )
