"""Fields of a request body that its API declares none for (a typo: `max_token`), as the
gateway's `unknown_fields` (or the tenant's) says: `warn` accepts and ignores them, as `vllm
serve` does, naming them in one log line and in the response's `x-shardgate-ignored-fields`
header; `reject` refuses the request (400), as OpenAI's and Anthropic's APIs do, in each
one's words. Their names come from the client: the listings are bounded (MAX_LISTED names,
MAX_NAME_CHARS each) and the header's and the log's percent-encode all but `A-Za-z0-9_.-~`.

Pure, but for `admit`'s log line."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final, Literal
from urllib.parse import quote

from gateway.config.tenants import UnknownFieldsMode
from gateway.policy.tenants import Tenant
from gateway.types import InvalidRequest, UnknownFields

__all__ = [
    "HEADER",
    "MAX_LISTED",
    "MAX_NAME_CHARS",
    "Style",
    "admit",
    "header_value",
    "mode_of",
    "refusal",
    "unknown_of",
]

log = logging.getLogger(__name__)

HEADER: Final = "x-shardgate-ignored-fields"
MAX_LISTED: Final = 8  # names listed; the rest are counted ("+3 more")
MAX_NAME_CHARS: Final = 64  # of each name listed (a longer one is cut, "...")

# Whose words a refusal uses: OpenAI's (its error object, `param`) or Anthropic's.
Style = Literal["openai", "anthropic"]


def unknown_of(keys: Iterable[str], known: frozenset[str]) -> UnknownFields | None:
    """The keys (a body's, in its order) not in `known`; None when every one is."""
    names: list[str] = []
    count = 0
    for key in keys:
        if key not in known:
            count += 1
            if count <= MAX_LISTED:
                names.append(key)
    return UnknownFields(tuple(names), count) if count else None


def mode_of(gateway: UnknownFieldsMode, tenant: UnknownFieldsMode | None) -> UnknownFieldsMode:
    """The tenant's word, else the gateway's."""
    return gateway if tenant is None else tenant


def _cut(name: str) -> str:
    return name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS] + "..."


def _encoded(name: str) -> str:
    """`name` percent-encoded (safe in a header and a log line), at most MAX_NAME_CHARS
    characters of escapes: a longer one is cut between two characters, "..." after it."""
    out: list[str] = []
    size = 0
    for ch in name:
        q = quote(ch, safe="")
        size += len(q)
        if size > MAX_NAME_CHARS:
            return "".join(out) + "..."
        out.append(q)
    return "".join(out)


def _more(u: UnknownFields) -> list[str]:
    left = u.count - len(u.names)
    return [f"+{left} more"] if left > 0 else []


def header_value(u: UnknownFields) -> str:
    """The names, encoded, comma-separated; the count of those not listed last."""
    return ", ".join([*(_encoded(n) for n in u.names), *_more(u)])


def refusal(u: UnknownFields, style: Style = "openai") -> InvalidRequest:
    """The 400 of `reject`: OpenAI's "Unrecognized request argument supplied: a, b" with the
    first as its `param`, or Anthropic's "a: Extra inputs are not permitted"."""
    names = [_cut(n) for n in u.names]
    if style == "anthropic":
        said = [f"{n}: Extra inputs are not permitted" for n in names]
        return InvalidRequest(", ".join(said + _more(u)), names[0])
    listed = ", ".join(names + _more(u))
    return InvalidRequest(f"Unrecognized request argument supplied: {listed}", names[0])


def admit(
    u: UnknownFields,
    request_id: str,
    tenant: Tenant,
    gateway: UnknownFieldsMode,
    style: Style = "openai",
) -> None:
    """Refuse the request (`reject`), or log its ignored fields once (`warn`: the response's
    header names them too, from the request's `unknown_fields`)."""
    if mode_of(gateway, tenant.unknown_fields) == "reject":
        raise refusal(u, style)
    log.warning(
        "request %s (tenant %s): fields present in the request but ignored: %s",
        request_id,
        tenant.name,
        header_value(u),
    )
