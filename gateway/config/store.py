"""Config of the store (keys, teams, the spend ledger) and of the admin API over it.

    store:
      url: sqlite:///.shardgate/store.db      # or postgresql://user@host/db
    admin:
      master_key: os.environ/SHARDGATE_MASTER_KEY

`admin:` without `store:` keeps the store in its default SQLite file. A master key given as
`os.environ/NAME` is read from that variable at start (and at each reload).
"""

from __future__ import annotations

import os
from typing import Annotated, Final

import msgspec

DEFAULT_URL: Final = "sqlite:///.shardgate/store.db"
ENV_PREFIX: Final = "os.environ/"

Seconds = Annotated[float, msgspec.Meta(gt=0, le=3600)]
Count = Annotated[int, msgspec.Meta(gt=0)]


class StoreConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    url: str = DEFAULT_URL
    # How often each instance (each of `--workers`) reads the store's version of its keys and
    # teams: a key revoked by another is refused here within this bound (plus the read's own
    # time); and the budgets' spend.
    poll_s: Seconds = 0.5
    # Ledger rows are written in batches, at most this long after their request ended...
    flush_s: Seconds = 0.2
    # ...and at most this many wait (beyond, a row is dropped and counted, never waited for).
    max_pending_rows: Count = 100_000

    def __post_init__(self) -> None:
        if not self.url.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise ValueError("store.url: must be sqlite:///PATH or postgresql://...")


class AdminConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # Bearer key of the management API (/key/*, /team/*, /spend/*, /admin/*).
    master_key: Annotated[str, msgspec.Meta(min_length=1)]

    def __post_init__(self) -> None:
        secret(self.master_key)  # an unset variable is an error at load, not at the first call


def secret(value: str) -> str:
    """`value`, or the environment variable that `os.environ/NAME` names."""
    if not value.startswith(ENV_PREFIX):
        return value
    name = value[len(ENV_PREFIX) :]
    got = os.environ.get(name)
    if not got:
        raise ValueError(f"admin.master_key: environment variable {name} is not set")
    return got


def sqlite_path(url: str) -> str:
    return url[len("sqlite:///") :]
