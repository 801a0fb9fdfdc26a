"""Structured outputs, however a request asks for them (OpenAI's `response_format`, vLLM's
`structured_outputs` or its older `guided_*` fields), as the one `Structured` of its engine
parameters; a request may ask in one way only."""

from __future__ import annotations

from typing import Any, Final, Protocol

import msgspec
from shardgate.v1.params import Structured

from gateway.api.openai.validation import bad, not_served


class AsksStructured(Protocol):
    """The fields of a request body that can ask for structured outputs."""

    response_format: dict[str, Any] | None
    structured_outputs: dict[str, Any] | None
    guided_json: Any
    guided_regex: Any
    guided_choice: Any
    guided_grammar: Any


def _schema_text(schema: object, field: str) -> str:
    if isinstance(schema, str):
        return schema
    if not isinstance(schema, dict):
        raise bad(field, "must be a JSON schema (an object)")
    return msgspec.json.encode(schema).decode()


def _from_response_format(fmt: dict[str, Any]) -> Structured | None:
    kind = fmt.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return Structured(field="response_format", json_object=True)
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise bad("response_format", "json_schema needs a 'schema'")
        return Structured(
            field="response_format", json=_schema_text(spec["schema"], "response_format")
        )
    raise bad("response_format", "type must be 'text', 'json_object' or 'json_schema'")


_KINDS: Final = ("json", "regex", "choice", "grammar", "json_object")


def _from_structured_outputs(spec: dict[str, Any]) -> Structured:
    field = "structured_outputs"
    unknown = sorted(set(spec) - set(_KINDS))
    if unknown:
        raise not_served(f"{field}.{unknown[0]}", "only json, regex, choice, grammar, json_object")
    given = [k for k in _KINDS if spec.get(k) is not None]
    if len(given) != 1:
        raise bad(field, f"exactly one of {', '.join(_KINDS)} must be given")
    return _structured(field, given[0], spec[given[0]])


def _structured(field: str, kind: str, value: object) -> Structured:
    if kind == "json":
        return Structured(field=field, json=_schema_text(value, field))
    if kind == "json_object":
        if value is not True:
            raise bad(field, "json_object must be true")
        return Structured(field=field, json_object=True)
    if kind == "choice":
        if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
            raise bad(field, "choice must be a non-empty array of strings")
        return Structured(field=field, choice=tuple(value))
    if not isinstance(value, str) or not value:
        raise bad(field, f"{kind} must be a non-empty string")
    return (
        Structured(field=field, regex=value)
        if kind == "regex"
        else Structured(field=field, grammar=value)
    )


def structured_of(req: AsksStructured) -> Structured | None:
    """The request's structured outputs, from whichever of vLLM's fields asked (one at most)."""
    found: list[Structured] = []
    if req.response_format is not None:
        s = _from_response_format(req.response_format)
        if s is not None:
            found.append(s)
    if req.structured_outputs is not None:
        found.append(_from_structured_outputs(req.structured_outputs))
    for kind in ("json", "regex", "choice", "grammar"):
        value = getattr(req, f"guided_{kind}")
        if value is not None:
            found.append(_structured(f"guided_{kind}", kind, value))
    if len(found) > 1:
        raise bad(found[1].field, f"structured outputs are already asked for by '{found[0].field}'")
    return found[0] if found else None
