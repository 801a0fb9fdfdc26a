"""The `redis:` section, the URL forms and the key names."""

from __future__ import annotations

import pytest

from gateway.config.loader import REDIS_URL_ENV, ConfigError, parse
from gateway.shared_limits.keys import instances_key, pool_keys, tenant_keys
from gateway.shared_limits.target import Target, parse_target


def test_defaults_and_absence() -> None:
    assert parse("{}").redis is None
    r = parse("redis: {}").redis
    assert r is not None
    assert (r.url, r.key_prefix, r.timeout_ms) == ("redis://127.0.0.1:6379/0", "shardgate", 50)


@pytest.mark.parametrize(
    ("yaml", "names"),
    [
        ("redis: {url: 'http://x:1'}", "scheme 'http'"),
        ("redis: {timeout_ms: 0}", "timeout_ms"),
        ("redis: {key_prefix: 'a{b}'}", "key_prefix"),
        ("redis: {urls: 'redis://x'}", "urls"),
        ("redis: {url: 'redis+sentinel://s:1'}", "service"),
    ],
)
def test_bad_sections_name_the_field(yaml: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        parse(yaml)


def test_the_environment_overrides_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REDIS_URL_ENV, "redis://10.0.0.7:6380/2")
    r = parse("redis: {key_prefix: gw}").redis
    assert r is not None and (r.url, r.key_prefix) == ("redis://10.0.0.7:6380/2", "gw")
    assert parse("{}").redis is None  # it does not turn Redis on


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("redis://127.0.0.1:6379/0", Target("single", "redis://127.0.0.1:6379/0")),
        ("rediss://:pw@h:6380/1", Target("single", "rediss://:pw@h:6380/1")),
        (
            "redis+sentinel://s1:26379,s2:26379/mymaster/3",
            Target(
                "sentinel",
                "redis+sentinel://s1:26379,s2:26379/mymaster/3",
                (("s1", 26379), ("s2", 26379)),
                "mymaster",
                3,
            ),
        ),
        (
            "redis+sentinel://u:p%40ss@s1:26379/mymaster",
            Target(
                "sentinel",
                "redis+sentinel://u:p%40ss@s1:26379/mymaster",
                (("s1", 26379),),
                "mymaster",
                0,
                "u",
                "p@ss",
            ),
        ),
        (
            "redis+cluster://n1:7000,n2:7001",
            Target("cluster", "redis+cluster://n1:7000,n2:7001", (("n1", 7000), ("n2", 7001))),
        ),
    ],
)
def test_url_forms(url: str, target: Target) -> None:
    assert parse_target(url) == target


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://s1:26379",  # no service
        "redis+sentinel://s1:26379/m/x",  # db not a number
        "redis+sentinel://s1/m",  # no port
        "redis+cluster://n1:7000/0",  # a cluster has one db
    ],
)
def test_bad_url_forms(url: str) -> None:
    with pytest.raises(ValueError, match=r"redis\.url"):
        parse_target(url)


def test_a_tenants_keys_share_one_hash_tag_and_names_cannot_escape_it() -> None:
    keys = tenant_keys("sg", "acme", "llama")
    assert keys == ("sg:{t:acme}:llama:rq", "sg:{t:acme}:llama:tk", "sg:{t:acme}:llama:cc")
    odd = tenant_keys("sg", "a}b{%", "m{x}")
    assert odd[0] == "sg:{t:a%7Db%7B%25}:m%7Bx%7D:rq"
    assert tenant_keys("sg", "a%7D", "m")[0] != tenant_keys("sg", "a}", "m")[0]
    assert pool_keys("sg", "llama")[1] == "sg:{m:llama}:tk"
    assert instances_key("sg") == "sg:{instances}"
