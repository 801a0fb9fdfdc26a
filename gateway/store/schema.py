"""The store's schema, as numbered migrations run in order at start (each once, in one
transaction with the version it brings). SQL common to SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Final

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
        "INSERT INTO meta (name, value) VALUES ('keys_version', 0)",
        """CREATE TABLE teams (
            team_id TEXT PRIMARY KEY, team_alias TEXT, models TEXT NOT NULL,
            max_budget DOUBLE PRECISION, budget_duration TEXT, budget_reset_at DOUBLE PRECISION,
            spend DOUBLE PRECISION NOT NULL DEFAULT 0, tpm_limit BIGINT, rpm_limit BIGINT,
            metadata TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE keys (
            token TEXT PRIMARY KEY, key_name TEXT NOT NULL, key_alias TEXT, team_id TEXT,
            models TEXT NOT NULL, max_budget DOUBLE PRECISION, budget_duration TEXT,
            budget_reset_at DOUBLE PRECISION, spend DOUBLE PRECISION NOT NULL DEFAULT 0,
            tpm_limit BIGINT, rpm_limit BIGINT, metadata TEXT NOT NULL,
            expires DOUBLE PRECISION, created_at DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE ledger (
            id TEXT PRIMARY KEY, request_id TEXT NOT NULL, token TEXT, team_id TEXT NOT NULL,
            model TEXT NOT NULL,
            prompt_tokens BIGINT NOT NULL, completion_tokens BIGINT NOT NULL,
            cached_tokens BIGINT NOT NULL, spend DOUBLE PRECISION NOT NULL, status TEXT NOT NULL,
            start_time DOUBLE PRECISION NOT NULL, end_time DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX ledger_by_time ON ledger (end_time)",
        "CREATE INDEX ledger_by_token ON ledger (token, end_time)",
        "CREATE INDEX ledger_by_team ON ledger (team_id, end_time)",
        "CREATE INDEX ledger_by_request ON ledger (request_id)",
    ),
)

VERSION_TABLE: Final = "CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)"
