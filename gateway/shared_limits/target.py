"""Where Redis is, from `redis.url`: one server, a Sentinel-managed master, or a Cluster."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit


@dataclass(frozen=True, slots=True)
class Target:
    """Where Redis is: `kind` single (redis, rediss, unix), sentinel or cluster."""

    kind: str
    url: str  # single: the URL redis-py takes
    hosts: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None


def parse_target(url: str) -> Target:
    """redis+sentinel://[user:pass@]h:p[,h:p...]/service[/db] and
    redis+cluster://[user:pass@]h:p[,h:p...]; anything else is a single server's URL."""
    scheme, sep, rest = url.partition("://")
    if scheme not in ("redis+sentinel", "redis+cluster"):
        return Target("single", url)
    if not sep:
        raise ValueError(f"redis.url {url!r}: expected {scheme}://host:port")
    parts = urlsplit("redis://" + rest)
    userinfo, _, netloc = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    hosts = []
    for item in netloc.split(","):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"redis.url {url!r}: {item!r} is not host:port")
        hosts.append((host.strip("[]"), int(port)))
    path = [p for p in parts.path.split("/") if p]
    kind = scheme.removeprefix("redis+")
    service, db = "", 0
    if kind == "sentinel":
        if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
            raise ValueError(f"redis.url {url!r}: expected .../<service>[/<db>]")
        service, db = path[0], int(path[1]) if len(path) == 2 else 0
    elif path:
        raise ValueError(f"redis.url {url!r}: a cluster URL has no path")
    return Target(
        kind,
        url,
        tuple(hosts),
        service,
        db,
        unquote(user) or None,
        unquote(password) if userinfo else None,
    )
