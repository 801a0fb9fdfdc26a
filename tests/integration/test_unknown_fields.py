"""Unknown request fields through the real API, on both HTTP paths: by default accepted as
`vllm serve` accepts them, named in the `x-shardgate-ignored-fields` header (whole answers and
streams) and in one warning; refused (400, OpenAI's or Anthropic's words and shape) where the
tenant's or the gateway's `unknown_fields` says reject, which reloads."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster

HEADER = "x-shardgate-ignored-fields"
LOGGER = "gateway.policy.unknown_fields"
TENANTS = """tenants:
  - {name: loose, keys: [sk-loose]}
  - {name: strict, keys: [sk-strict], unknown_fields: reject}
  - {name: lenient, keys: [sk-lenient], unknown_fields: warn}
"""
MESSAGES = [{"role": "user", "content": "hi"}]
TYPOS = {"max_token": 8, "foo": 1}  # (max_token: a typo of max_tokens)
CHAT = {"model": "sim-llama", "messages": MESSAGES, "ignore_eos": True}
COMPLETION = {"model": "sim-llama", "prompt": "hi", "ignore_eos": True}
MESSAGE = {"model": "sim-llama", "max_tokens": 2, "messages": MESSAGES}
RESPONSE = {"model": "sim-llama", "input": "hi", "max_output_tokens": 2}
ROUTES = [("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)]
DEFAULT_MAX_TOKENS = 4
UNRECOGNIZED = {
    "message": "Unrecognized request argument supplied: max_token, foo",
    "type": "invalid_request_error",
    "param": "max_token",
}


def gateway_yaml(lean: bool, more: str = "") -> str:
    return (
        f"gateway: {{default_max_tokens: {DEFAULT_MAX_TOKENS}, watch_config: false, "
        f"lean_http: {str(lean).lower()}{more}}}\n{TENANTS}"
    )


@dataclass(frozen=True)
class Front:
    cluster: Cluster
    lean: bool  # chat and completions served by the lean path (else by aiohttp)


@pytest.fixture(scope="module", params=["lean", "aiohttp"])
def front(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Front]:
    lean = request.param == "lean"
    path: Path = tmp_path_factory.mktemp(request.param) / "gateway.yaml"
    c = Cluster(gateway_yaml(lean), [{"sim": SimConfig(model="sim-llama", profile="fast")}], path)
    c.start()
    yield Front(c, lean)
    c.stop()


def _headers(key: str, rid: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "x-request-id": rid}


def post(f: Front, path: str, body: Any, key: str, rid: str) -> httpx.Response:
    url = f"{f.cluster.http_url}{path}"
    r = httpx.post(url, json=body, headers=_headers(key, rid), timeout=30)
    if path in ("/v1/chat/completions", "/v1/completions"):
        # (aiohttp names itself in a `Server` header, the lean path sends none)
        assert ("aiohttp" in r.headers.get("server", "")) != f.lean
    return r


def streamed(f: Front, path: str, body: Any, key: str, rid: str) -> tuple[httpx.Response, str]:
    url, headers = f"{f.cluster.http_url}{path}", _headers(key, rid)
    with httpx.stream("POST", url, json={**body, "stream": True}, headers=headers) as r:
        return r, r.read().decode()


def warnings_of(caplog: pytest.LogCaptureFixture, rid: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and r.levelno == logging.WARNING and f"request {rid} " in r.getMessage()
    ]


def reload(f: Front, more: str) -> None:
    c = f.cluster
    assert c.config_path is not None
    c.config_path.write_text(c.config_text(gateway_yaml(f.lean, more), [0]))
    assert httpx.post(f"{c.http_url}/admin/reload", timeout=30).status_code == 200


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=["chat", "completions"])
def test_warn_accepts_them_and_names_them_in_a_header_and_one_warning(
    front: Front, path: str, body: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    rid = f"warn-{front.lean}-{path[4:8]}"
    r = post(front, path, {**body, **TYPOS}, "sk-loose", rid)
    assert r.status_code == 200, r.text
    assert r.headers[HEADER] == "max_token, foo"
    # ignored, as vllm serve ignores it: the default number of tokens
    assert r.json()["usage"]["completion_tokens"] == DEFAULT_MAX_TOKENS
    assert warnings_of(caplog, rid) == [
        f"request {rid} (tenant loose): fields present in the request but ignored: max_token, foo"
    ]


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=["chat", "completions"])
def test_a_stream_names_them_in_its_head(
    front: Front, path: str, body: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    rid = f"stream-{front.lean}-{path[4:8]}"
    r, text = streamed(front, path, {**body, **TYPOS}, "sk-loose", rid)
    assert r.status_code == 200
    assert r.headers[HEADER] == "max_token, foo"
    assert text.endswith("data: [DONE]\n\n")
    assert len(warnings_of(caplog, rid)) == 1


def test_n_choices_are_one_request_one_warning(
    front: Front, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for stream in (False, True):
        rid = f"choices-{front.lean}-{stream}"
        body = {**CHAT, **TYPOS, "n": 3, "stream": stream}
        r = post(front, "/v1/chat/completions", body, "sk-loose", rid)
        assert r.status_code == 200
        assert r.headers[HEADER] == "max_token, foo"
        assert len(warnings_of(caplog, rid)) == 1


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=["chat", "completions"])
def test_a_clean_body_gets_neither(
    front: Front, path: str, body: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    r = post(front, path, body, "sk-loose", "clean")
    assert r.status_code == 200
    assert HEADER not in r.headers
    r, _ = streamed(front, path, body, "sk-loose", "clean")
    assert HEADER not in r.headers
    assert [rec for rec in caplog.records if rec.name == LOGGER] == []


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=["chat", "completions"])
def test_a_tenant_that_rejects_gets_openai_s_400(
    front: Front, path: str, body: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for stream in (False, True):
        r = post(front, path, {**body, **TYPOS, "stream": stream}, "sk-strict", "rejected")
        assert r.status_code == 400
        error = r.json()["error"]
        assert {k: error[k] for k in UNRECOGNIZED} == UNRECOGNIZED
        assert HEADER not in r.headers
    assert warnings_of(caplog, "rejected") == []  # (the 400 says it)
    assert post(front, path, body, "sk-strict", "fine").status_code == 200


def test_the_gateway_s_reject_reloads_and_a_tenant_s_warn_overrides_it(
    front: Front, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    body = {**CHAT, **TYPOS}
    assert post(front, "/v1/chat/completions", body, "sk-loose", "before").status_code == 200
    reload(front, ", unknown_fields: reject")
    try:
        for path, routed in ROUTES:
            r = post(front, path, {**routed, **TYPOS}, "sk-loose", "after")
            assert r.status_code == 400
            assert r.json()["error"]["message"] == UNRECOGNIZED["message"]
            r = post(front, path, {**routed, **TYPOS}, "sk-lenient", "lenient")
            assert r.status_code == 200
            assert r.headers[HEADER] == "max_token, foo"
        # the other APIs read it too
        r = post(front, "/v1/responses", {**RESPONSE, **TYPOS}, "sk-loose", "after")
        assert r.status_code == 400
        r = post(front, "/v1/messages", {**MESSAGE, **TYPOS}, "sk-loose", "after")
        assert r.status_code == 400
        assert r.json()["type"] == "error"
    finally:
        reload(front, "")
    assert post(front, "/v1/chat/completions", body, "sk-loose", "back").status_code == 200


def test_messages_warn_or_refuse_in_anthropic_s_shape(
    front: Front, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    body = {**MESSAGE, **TYPOS}
    r = post(front, "/v1/messages", body, "sk-loose", "msg-warn")
    assert r.status_code == 200, r.text
    assert r.headers[HEADER] == "max_token, foo"
    assert len(warnings_of(caplog, "msg-warn")) == 1
    r, text = streamed(front, "/v1/messages", body, "sk-loose", "msg-stream")
    assert r.status_code == 200
    assert r.headers[HEADER] == "max_token, foo"
    assert "event: message_stop" in text
    r = post(front, "/v1/messages", body, "sk-strict", "msg-reject")
    assert r.status_code == 400
    assert r.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": (
                "max_token: Extra inputs are not permitted, foo: Extra inputs are not permitted"
            ),
        },
    }


def test_responses_warn_or_refuse(front: Front, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    body = {**RESPONSE, **TYPOS, "store": False}
    r = post(front, "/v1/responses", body, "sk-loose", "resp-warn")
    assert r.status_code == 200, r.text
    assert r.headers[HEADER] == "max_token, foo"
    assert len(warnings_of(caplog, "resp-warn")) == 1
    r, text = streamed(front, "/v1/responses", body, "sk-loose", "resp-stream")
    assert r.status_code == 200
    assert r.headers[HEADER] == "max_token, foo"
    assert "response.completed" in text
    r = post(front, "/v1/responses", body, "sk-strict", "resp-reject")
    assert r.status_code == 400
    error = r.json()["error"]
    assert {k: error[k] for k in UNRECOGNIZED} == UNRECOGNIZED


def test_names_are_bounded_and_encoded_in_the_header(front: Front) -> None:
    fields = {f"field_{i}": i for i in range(12)} | {"a b\r\nx-evil: 1": 0}
    r = post(front, "/v1/chat/completions", {**CHAT, **fields}, "sk-loose", "many")
    assert r.status_code == 200
    listed = ", ".join(f"field_{i}" for i in range(8))
    assert r.headers[HEADER] == f"{listed}, +5 more"
    assert "x-evil" not in r.headers
    r = post(front, "/v1/chat/completions", {**CHAT, "a b\r\nx-evil: 1": 0}, "sk-loose", "crlf")
    assert r.headers[HEADER] == "a%20b%0D%0Ax-evil%3A%201"
    assert "x-evil" not in r.headers
    assert json.loads(r.text)["choices"]
