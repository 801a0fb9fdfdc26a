"""Fuzzing the HTTP edge: random methods, paths, headers and JSON bodies (deep nesting, huge
numbers, wrong types, invalid UTF-8) over a real socket to a real gateway. Whatever is sent,
the answer is never a 5xx and the gateway stays up.

Bounded for CI by the `http-fuzz` settings profile (200 examples, no per-example deadline, no
example database in the tree).
"""

from __future__ import annotations

import json
import re
import socket
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster
from tests.integration.conftest import GATEWAY_YAML

settings.register_profile(
    "http-fuzz",
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Every request is whole (a head ended by an empty line, a body of its Content-Length), so no
# answer waits on a timer: each one comes at once.
SOCKET_TIMEOUT_S = 30.0

PATHS = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/messages/nope",
    "/v1/models",
    "/v1/models/sim-llama",
    "/v1/models/nope",
    "/healthz",
    "/readyz",
    "/metrics",
    "/admin/config",
    "/admin/reload",
    "/",
]
GENERATING = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
HEADER_NAMES = [
    "Content-Type",
    "Authorization",
    "x-api-key",
    "anthropic-version",
    "Accept",
    "Accept-Encoding",
    "Content-Encoding",
    "x-priority",
    "x-session-id",
    "x-request-id",
    "Last-Event-ID",
    "Expect",
    "Upgrade",
    "Cookie",
]
# Header values and the request target: anything but the line breaks that end them.
LINE = st.text(st.characters(blacklist_characters="\r\n", codec="utf-8"), max_size=80)
TOKEN = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz-_0123456789"), min_size=1, max_size=20)


class Huge:
    """A number as JSON text, written as is (past what Python's int and float convert)."""

    def __init__(self, text: str) -> None:
        self.text = text


_HUGE = re.compile(r'"@huge:([-+.0-9eE]+)@"')

huge_numbers = st.builds(
    Huge,
    st.sampled_from(
        ["1e30", "-1e30", "18446744073709551616", "9223372036854775808", "-9223372036854775809",
         "1e400", "-1e400", "1.7976931348623157e308", "5e-324", "1e-400", "0.0000001e999"]
    )
    | st.integers(20, 6000).map(lambda n: "1" + "0" * n)
    | st.integers(20, 6000).map(lambda n: "-0." + "9" * n),
)  # fmt: skip


def encode_json(obj: object) -> bytes:
    text = json.dumps(obj, default=lambda h: f"@huge:{h.text}@")
    return _HUGE.sub(lambda m: m[1], text).encode()


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-10, 10)
    | huge_numbers
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)

# Content blocks (Anthropic's, and OpenAI's content parts): near misses of a text block.
blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "tool_result", "image"]) | values},
    optional={"text": st.text(max_size=20) | values},
)

# A valid request, then a few of its fields replaced, removed or added: near misses of what the
# gateway serves (it serves the unchanged ones) rather than noise it refuses at the first byte.
FIELDS = ["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature",
          "top_p", "top_k", "seed", "stop", "stream", "stream_options", "n", "best_of", "echo",
          "logprobs", "priority", "ignore_eos", "user", "unknown",
          # Anthropic's Messages fields
          "system", "stop_sequences", "metadata", "tools", "tool_choice", "thinking",
          "output_config"]  # fmt: skip
FIELD_VALUES = {
    "model": st.sampled_from(["sim-llama", "nope", ""]) | values,
    "messages": st.lists(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user", "system", "assistant", "developer", "tool"])
                | values
            },
            optional={"content": st.text(max_size=40) | values | st.lists(blocks), "name": values},
        ),
        max_size=3,
    )
    | values,
    "system": st.text(max_size=20) | st.lists(blocks, max_size=2) | values,
    "stop_sequences": st.lists(st.text(max_size=5), max_size=3) | values,
    "max_tokens": st.integers(-2, 8) | huge_numbers | values,
    "seed": st.integers(0, 10) | huge_numbers | values,
    "stream": st.booleans() | values,
    "priority": st.integers(-3, 3) | huge_numbers | values,
}


@st.composite
def mutation(draw: st.DrawFn) -> tuple[str, list[object] | None]:
    """A field and its new value (in a list), or None to remove it."""
    name = draw(st.sampled_from(FIELDS))
    if draw(st.integers(0, 4)) == 0:
        return name, None
    return name, [draw(FIELD_VALUES.get(name, values))]


def is_anthropic(target: str) -> bool:
    """A route of Anthropic's Messages API (its errors are in Anthropic's shape)."""
    path = target.split("?", 1)[0]
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def valid_body(path: str) -> dict[str, object]:
    if is_anthropic(path):
        text = [{"type": "text", "text": "hi"}]
        return {"model": "sim-llama", "max_tokens": 2, "system": "Be brief.",
                "messages": [{"role": "user", "content": text}]}  # fmt: skip
    if path == "/v1/completions":
        return {"model": "sim-llama", "prompt": "Once upon a time", "max_tokens": 2}
    return {"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def nested(depth: int, opener: str) -> str:
    closer = "]" if opener == "[" else "}"
    leaf = "" if opener == "[" else "1"
    return opener * depth + leaf + closer * depth


@st.composite
def json_bodies(draw: st.DrawFn, path: str) -> bytes:
    how = draw(
        st.sampled_from(["plain"] * 3 + ["deep"] * 3 + ["invalid-utf8", "truncated", "bytes"])
    )
    fields = valid_body(path)
    # A deep value alone, often: a field refused first would hide it from the decoder.
    if how != "deep" or draw(st.booleans()):
        for name, value in draw(st.lists(mutation(), max_size=3)):
            if value is None:
                fields.pop(name, None)
            else:
                fields[name] = value[0]
    body = encode_json(fields)
    if how == "deep":
        depth = draw(st.sampled_from([10_000, 64, 400_000]) | st.integers(1, 20_000))
        inner = nested(depth, draw(st.sampled_from(["[", '{"a":'])))
        key = draw(st.sampled_from(["unknown", "prompt"]) | st.sampled_from(FIELDS))
        return body[:-1] + (b", " if fields else b"") + f'"{key}": {inner}}}'.encode()
    if how == "invalid-utf8":
        at = draw(st.integers(0, len(body)))
        bad = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80"]))
        return body[:at] + bad + body[at:]
    if how == "truncated":
        return body[: draw(st.integers(0, max(0, len(body) - 1)))]
    if how == "bytes":
        return draw(st.binary(max_size=200))
    return body


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 3)):  # mostly the generation endpoints, as clients call them
        method, path = "POST", draw(st.sampled_from(GENERATING))
    else:
        method = draw(st.sampled_from(METHODS) | TOKEN.map(str.upper) | LINE)
        path = draw(st.sampled_from(PATHS) | LINE.map(lambda s: "/" + s))
    target = path + ("?" + draw(LINE) if draw(st.integers(0, 4)) == 0 else "")
    body = draw(json_bodies(path) | st.just(b""))
    headers = draw(st.lists(st.tuples(st.sampled_from(HEADER_NAMES) | TOKEN, LINE), max_size=4))
    if draw(st.booleans()):
        headers.append(("Content-Type", "application/json"))
    head = f"{method} {target} HTTP/1.1\r\nHost: fuzz\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers)
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode("utf-8", "surrogateescape") + body


def exchange(c: Cluster, raw: bytes) -> bytes:
    """Send one request; everything the gateway sends until it closes the connection."""
    assert c.gateway is not None
    with socket.create_connection(("127.0.0.1", c.gateway.http_port), SOCKET_TIMEOUT_S) as s:
        s.sendall(raw)
        out = bytearray()
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass  # closed with our unread bytes in its buffer: what it sent first came through
    return bytes(out)


def status_of(reply: bytes) -> int:
    line = reply.split(b"\r\n", 1)[0]
    assert line.startswith(b"HTTP/1."), reply[:200]
    return int(line.split(b" ", 2)[1])


# How the parser's refusals begin (the only answers on an Anthropic route in OpenAI's shape).
PARSER = (
    "The request is not valid HTTP",
    "The request line is not valid HTTP",
    "A request line or header field is longer",
    "The request has too many header fields",
)


def check_error_body(reply: bytes, status: int, path: str) -> None:
    """An error is JSON, whatever refused the request (router, handler, parser): Anthropic's
    shape from its routes (their handlers, and aiohttp's refusals once the route is known: an
    unknown Expect), OpenAI's everywhere else (and from the parser, which answers before any
    route is known: its refusals say what in HTTP they refused, gateway/api/http_errors.py)."""
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"\r\ncontent-type: application/json" in head.lower(), reply[:500]
    data = json.loads(body)
    err = data["error"]
    anthropic = data.get("type") == "error"
    if anthropic:
        assert is_anthropic(path), reply[:500]
        assert set(err) == {"type", "message"}, reply[:500]
    else:
        assert not is_anthropic(path) or err["message"].startswith(PARSER), reply[:500]
        assert err["code"] == status
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str)


STATUSES: Counter[int] = Counter()


@pytest.fixture(scope="module", params=["aiohttp", "lean"])
def fuzzed(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[Cluster]:
    """The lean path in front of aiohttp (the shared cluster: the default), and aiohttp alone."""
    if request.param == "lean":
        yield cluster
        return
    sim = SimConfig(model="sim-llama", profile="fast", max_model_len=4096)
    c = Cluster(GATEWAY_YAML + "  lean_http: false\n", [{"sim": sim}])
    c.start()
    yield c
    c.stop()


@settings(settings.get_profile("http-fuzz"))
@given(raw=requests())
def test_no_request_gets_a_5xx_and_the_gateway_stays_up(fuzzed: Cluster, raw: bytes) -> None:
    cluster = fuzzed
    reply = exchange(cluster, raw)
    status = status_of(reply)
    assert status < 500, reply[:500]
    if status >= 400 and not raw.startswith(b"HEAD "):
        check_error_body(reply, status, raw.split(b" ", 2)[1].decode("utf-8", "replace"))
    STATUSES[status] += 1
    health = exchange(cluster, b"GET /healthz HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n")
    assert status_of(health) == 200
