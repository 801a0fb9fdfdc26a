"""The management API's request bodies, with LiteLLM's field names. A field a body does not
declare is a 400 that names it: nothing is accepted and ignored."""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec

Usd = Annotated[float, msgspec.Meta(ge=0)]
PerMinute = Annotated[int, msgspec.Meta(gt=0)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class _Body(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class LimitFields(_Body, kw_only=True, forbid_unknown_fields=True):
    """What keys and teams both have."""

    models: list[Name] | None = None
    max_budget: Usd | None = None
    budget_duration: str | None = None
    tpm_limit: PerMinute | None = None
    rpm_limit: PerMinute | None = None
    metadata: dict[str, Any] | None = None


class KeyFields(LimitFields, kw_only=True, forbid_unknown_fields=True):
    key_alias: Name | None = None
    duration: str | None = None  # how long the key lives: "30d" ... (None: for ever)
    team_id: Name | None = None


class GenerateKey(KeyFields, kw_only=True, forbid_unknown_fields=True):
    key: Annotated[str, msgspec.Meta(min_length=8, max_length=256)] | None = None  # your own


class UpdateKey(KeyFields, kw_only=True, forbid_unknown_fields=True):
    key: Name  # the key, or its hash (`token`)


class DeleteKeys(_Body, kw_only=True, forbid_unknown_fields=True):
    keys: list[Name] | None = None
    key_aliases: list[Name] | None = None


class RegenerateKey(_Body, kw_only=True, forbid_unknown_fields=True):
    key: Name | None = None  # (or in the path: /key/{key}/regenerate)
    new_key: Annotated[str, msgspec.Meta(min_length=8, max_length=256)] | None = None
    # How long the old key keeps working ("24h"); None: it stops at once.
    grace_period: str | None = None


class NewTeam(LimitFields, kw_only=True, forbid_unknown_fields=True):
    team_id: Name | None = None
    team_alias: Name | None = None


class UpdateTeam(NewTeam, kw_only=True, forbid_unknown_fields=True):
    team_id: Name


EXPECTED: Final = {
    "key": "must be a string of 8 to 256 characters",
    "new_key": "must be a string of 8 to 256 characters",
    "key_alias": "must be a string",
    "team_id": "must be a string",
    "team_alias": "must be a string",
    "duration": "must be a duration such as 30d",
    "grace_period": "must be a duration such as 24h",
    "budget_duration": "must be a duration such as 30d or 1mo",
    "models": "must be an array of model names",
    "keys": "must be an array of keys",
    "key_aliases": "must be an array of key aliases",
    "max_budget": "must be a number >= 0 (dollars)",
    "tpm_limit": "must be an integer > 0",
    "rpm_limit": "must be an integer > 0",
    "metadata": "must be an object",
}
