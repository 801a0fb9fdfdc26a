from __future__ import annotations

import pytest

from gateway.config.loader import ConfigError, parse
from gateway.config.reload import restart_only_change
from gateway.config.store import DEFAULT_URL, StoreConfig, secret


def test_admin_alone_keeps_the_store_in_its_default_file() -> None:
    assert parse("admin: {master_key: k}").store_config() == StoreConfig(url=DEFAULT_URL)
    assert parse("").store_config() is None


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("store: {url: 'mysql://x'}", "sqlite:///PATH or postgresql://"),
        ("store: {poll_s: 0}", "poll_s"),
        ("admin: {master_key: ''}", "master_key"),
        ("admin: {master_key: os.environ/SHARDGATE_TEST_UNSET}", "SHARDGATE_TEST_UNSET is not set"),
    ],
)
def test_bad_store_and_admin_settings_are_named(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        parse(text)


def test_a_master_key_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDGATE_TEST_MASTER", "sk-from-env")
    c = parse("admin: {master_key: os.environ/SHARDGATE_TEST_MASTER}")
    assert c.admin is not None and secret(c.admin.master_key) == "sk-from-env"
    assert secret("sk-plain") == "sk-plain"


@pytest.mark.parametrize(
    ("old", "new", "changed"),
    [
        ("", "admin: {master_key: k}", "store"),  # (the default store it brings)
        ("store: {url: 'sqlite:///a.db'}", "store: {url: 'sqlite:///b.db'}", "store"),
        ("admin: {master_key: a}", "admin: {master_key: b}", None),
    ],
)
def test_the_store_changes_only_with_a_restart(old: str, new: str, changed: str | None) -> None:
    assert restart_only_change(parse(old), parse(new)) == changed
