"""Keys, budgets and the ledger through the real API: keys made with LiteLLM's endpoints,
called with the official openai SDK, stopped by their budget with a 429, revoked at once,
rotated with an overlap; the ledger and the refusal survive a restart of the gateway."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from engine_sidecar.backends.sim import SimConfig
from tests.integration.cluster import Cluster
from tests.postgres_server import PostgresServer

MASTER = "sk-master-test"
ADMIN = {"Authorization": f"Bearer {MASTER}"}
PROMPT_PER_1K = 1.0
COMPLETION_PER_1K = 2.0


def gateway_yaml(store_yaml: str) -> str:
    return (
        "gateway: {default_max_tokens: 4, watch_config: false}\n"
        f"{store_yaml}"
        f"admin: {{master_key: {MASTER}}}\n"
        "pricing:\n  models:\n"
        f"    sim-llama: {{prompt_per_1k_usd: {PROMPT_PER_1K}, "
        f"completion_per_1k_usd: {COMPLETION_PER_1K}}}\n"
        "tenants:\n  - {name: yaml-team, keys: [sk-yaml]}\n"
    )


def start(store: Path, more: str = "") -> Cluster:
    return start_on(f"store: {{url: 'sqlite:///{store}', poll_s: 0.2}}\n" + more)


def start_on(store_yaml: str, profile: str = "fast") -> Cluster:
    sim = SimConfig(model="sim-llama", profile=profile)
    c = Cluster(gateway_yaml(store_yaml), [{"sim": sim}])
    c.start()
    return c


def wait_for_key(c: Cluster, key: str) -> Any:
    """Until `c` (another instance) answers `key` (its answer): it reads the store within its
    poll."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return chat(c, key)
        except openai.AuthenticationError:
            assert time.monotonic() < deadline


def wait_refused(c: Cluster, key: str) -> None:
    """Until `c` refuses `key` as unknown (a revocation, not a limit)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            chat(c, key)
        except openai.AuthenticationError:
            return
        assert time.monotonic() < deadline


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "state" / "store.db"


@pytest.fixture
def cluster(store: Path) -> Iterator[Cluster]:
    c = start(store)
    yield c
    c.stop()


def admin(c: Cluster, method: str, path: str, body: Any = None, **params: str) -> httpx.Response:
    return httpx.request(
        method, f"{c.http_url}{path}", json=body, params=params, headers=ADMIN, timeout=30
    )


def ok(r: httpx.Response) -> Any:
    assert r.status_code == 200, r.text
    return r.json()


def client(c: Cluster, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{c.http_url}/v1", api_key=key, max_retries=0)


def chat(c: Cluster, key: str) -> Any:
    with client(c, key) as sdk:
        return sdk.chat.completions.create(
            model="sim-llama", messages=[{"role": "user", "content": "hello there"}], max_tokens=4
        )


def cost(usage: Any) -> float:
    return (
        usage.prompt_tokens * PROMPT_PER_1K + usage.completion_tokens * COMPLETION_PER_1K
    ) / 1000


def test_a_key_is_answered_until_its_budget_is_spent_then_refused_also_after_a_restart(
    store: Path,
) -> None:
    c = start(store)
    try:
        made = ok(admin(c, "POST", "/key/generate", {"max_budget": 0.05, "models": ["sim-llama"]}))
        key = made["key"]
        assert made["token"] not in key and len(made["token"]) == 64
        spent, answered = 0.0, []
        with pytest.raises(openai.RateLimitError) as refused:
            for _ in range(100):
                r = chat(c, key)
                answered.append(r.id.removeprefix("chatcmpl-"))  # (the request's id)
                spent += cost(r.usage)
        assert refused.value.body["type"] == "budget_exceeded"  # type: ignore[index]
        assert "Budget has been exceeded" in refused.value.message
        assert spent >= 0.05  # answered until the spend reached the budget
        assert spent - cost(r.usage) < 0.05  # and no longer: the last one took it over
        info = ok(admin(c, "GET", "/key/info", key=made["token"]))["info"]
        assert info["spend"] == pytest.approx(spent, rel=1e-9)
    finally:
        c.stop()
    c = start(store)
    try:
        with pytest.raises(openai.RateLimitError):
            chat(c, key)
        logs = ok(admin(c, "GET", "/spend/logs", api_key=key))
        assert sorted(row["request_id"] for row in logs) == sorted(answered)
        assert sum(row["spend"] for row in logs) == pytest.approx(spent, rel=1e-9)
        csv = admin(c, "GET", "/spend/logs", api_key=key, format="csv")
        assert csv.headers["content-type"].startswith("text/csv")
        assert len(csv.text.strip().splitlines()) == len(answered) + 1
    finally:
        c.stop()


def test_a_deleted_key_is_refused_by_the_next_request(cluster: Cluster) -> None:
    key = ok(admin(cluster, "POST", "/key/generate", {}))["key"]
    chat(cluster, key)
    assert ok(admin(cluster, "POST", "/key/delete", {"keys": [key]})) == {"deleted_keys": [key]}
    with pytest.raises(openai.AuthenticationError):
        chat(cluster, key)


def test_a_key_deleted_on_one_instance_is_refused_on_another_within_its_poll(
    store: Path, cluster: Cluster
) -> None:
    other = start(store)
    try:
        key = ok(admin(cluster, "POST", "/key/generate", {}))["key"]
        wait_for_key(other, key)
        ok(admin(cluster, "POST", "/key/delete", {"keys": [key]}))
        wait_refused(other, key)
    finally:
        other.stop()


def test_a_rotated_key_keeps_working_for_its_grace_period_only(cluster: Cluster) -> None:
    old = ok(admin(cluster, "POST", "/key/generate", {"key_alias": "svc"}))["key"]
    new = ok(admin(cluster, "POST", "/key/regenerate", {"key": old, "grace_period": "1h"}))
    chat(cluster, old)
    chat(cluster, new["key"])
    newer = ok(admin(cluster, "POST", f"/key/{new['key']}/regenerate"))["key"]
    chat(cluster, newer)
    with pytest.raises(openai.AuthenticationError):
        chat(cluster, new["key"])
    info = ok(admin(cluster, "GET", "/key/info", key=newer))["info"]
    assert info["key_alias"] == "svc"


def test_a_teams_budget_stops_its_keys_and_the_config_files_keys(cluster: Cluster) -> None:
    ok(admin(cluster, "POST", "/team/new", {"team_id": "yaml-team", "max_budget": 0.03}))
    key = ok(admin(cluster, "POST", "/key/generate", {"team_id": "yaml-team"}))["key"]
    with pytest.raises(openai.RateLimitError):
        for _ in range(100):
            chat(cluster, key)
    with pytest.raises(openai.RateLimitError):
        chat(cluster, "sk-yaml")  # the team's budget: its config key too
    team = ok(admin(cluster, "GET", "/team/info", team_id="yaml-team"))
    assert team["team_info"]["spend"] >= 0.03
    assert [k["team_id"] for k in team["keys"]] == ["yaml-team"]


def test_a_key_outside_its_models_or_past_its_expiry_is_refused(cluster: Cluster) -> None:
    key = ok(admin(cluster, "POST", "/key/generate", {"models": ["other-model"]}))["key"]
    with pytest.raises(openai.AuthenticationError) as e:
        chat(cluster, key)
    assert "not allowed to call model sim-llama" in e.value.message
    key = ok(admin(cluster, "POST", "/key/generate", {"duration": "1s"}))["key"]
    deadline = time.monotonic() + 10
    while True:
        try:
            chat(cluster, key)
        except openai.AuthenticationError as e2:
            assert "Expired Key" in e2.message
            break
        assert time.monotonic() < deadline


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/key/generate", {"aliases": {}}, "aliases"),
        ("/key/generate", {"max_budget": -1}, "max_budget"),
        ("/key/generate", {"budget_duration": "monthly"}, "budget_duration"),
        ("/key/generate", {"team_id": "nobody"}, "team_id"),
        ("/key/delete", {}, None),
        ("/key/delete", {"key_aliases": ["nobody"]}, "key_aliases"),
        ("/key/generate", {"duration": "99999999mo"}, "duration"),
        ("/key/regenerate", {"key": "sk-nope"}, "key"),
        ("/team/new", {"team_id": "t", "rpm_limit": 0}, "rpm_limit"),
    ],
)
def test_bad_management_calls_are_400s_naming_the_field(
    cluster: Cluster, path: str, body: Any, param: str | None
) -> None:
    r = admin(cluster, "POST", path, body)
    assert r.status_code in (400, 404), r.text
    assert r.json()["error"]["param"] == param


def test_a_body_that_is_not_json_is_a_400(cluster: Cluster) -> None:
    for body in (b"", b"{", b"[]"):
        r = httpx.post(f"{cluster.http_url}/key/generate", content=body, headers=ADMIN)
        assert r.status_code == 400, r.text


def test_a_key_of_your_own_works_even_when_it_looks_like_a_hash(cluster: Cluster) -> None:
    own = "ab" * 32
    made = ok(admin(cluster, "POST", "/key/generate", {"key": own}))
    assert made["key"] == own and made["token"] != own
    chat(cluster, own)
    r = admin(cluster, "POST", "/key/regenerate", {"key": own, "new_key": own})
    assert r.status_code == 400 and r.json()["error"]["param"] == "new_key"


def test_the_management_api_needs_the_master_key(cluster: Cluster) -> None:
    r = httpx.post(f"{cluster.http_url}/key/generate", json={}, timeout=30)
    assert r.status_code == 401
    r = httpx.post(
        f"{cluster.http_url}/key/generate", json={}, headers={"Authorization": "Bearer x"}
    )
    assert r.status_code == 401
    doc = httpx.get(f"{cluster.http_url}/openapi.json", timeout=30).json()
    assert "/key/generate" in doc["paths"]


def test_the_ledger_holds_every_request_answered_before_a_restart_exactly_once(
    store: Path,
) -> None:
    c = start(store)
    key = ok(admin(c, "POST", "/key/generate", {}))["key"]

    async def run() -> list[str]:
        done: list[str] = []
        some = asyncio.Event()
        aclient = openai.AsyncOpenAI(base_url=f"{c.http_url}/v1", api_key=key, max_retries=0)

        refused = 0

        async def worker() -> None:
            nonlocal refused
            while True:  # until the gateway is gone
                try:
                    r = await aclient.chat.completions.create(
                        model="sim-llama", messages=[{"role": "user", "content": "x"}], max_tokens=4
                    )
                except openai.APIError:
                    refused += 1
                    return
                done.append(r.id.removeprefix("chatcmpl-"))
                if len(done) >= 50:
                    some.set()

        async with aclient:
            tasks = [asyncio.ensure_future(worker()) for _ in range(20)]
            await some.wait()  # a load under way: the gateway stops in its middle
            await asyncio.to_thread(c.stop)
            await asyncio.gather(*tasks)
        assert refused == 20  # each worker's last request found it stopped
        return done

    answered = asyncio.run(run())
    c = start(store)
    try:
        rows = ok(admin(c, "GET", "/spend/logs", api_key=key))
        ok_rows = [r["request_id"] for r in rows if r["status"] in ("ok", "length")]
        assert len(answered) >= 50
        assert sorted(ok_rows) == sorted(answered)
        assert len({r["request_id"] for r in rows}) == len(rows)
    finally:
        c.stop()


def test_two_instances_on_postgresql_ledger_every_answer_and_share_a_budget(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.database()
    more = f"store: {{url: '{url}', poll_s: 0.05}}\n"
    a, b = start_on(more), start_on(more)
    try:
        key = ok(admin(a, "POST", "/key/generate", {}))["key"]
        first = wait_for_key(b, key)

        async def load() -> list[Any]:
            sdks = [
                openai.AsyncOpenAI(base_url=f"{c.http_url}/v1", api_key=key, max_retries=0)
                for c in (a, b)
            ]
            got = await asyncio.gather(
                *(
                    sdks[i % 2].chat.completions.create(
                        model="sim-llama", messages=[{"role": "user", "content": "x"}], max_tokens=4
                    )
                    for i in range(200)
                )
            )
            for sdk in sdks:
                await sdk.close()
            return list(got)

        answers = [first, *asyncio.run(load())]
        ok(admin(b, "GET", "/spend/logs", api_key=key))  # (b's rows written)
        rows = ok(admin(a, "GET", "/spend/logs", api_key=key))
        assert len(rows) == 201
        assert sum(r["total_tokens"] for r in rows) == sum(x.usage.total_tokens for x in answers)
        assert sum(r["spend"] for r in rows) == pytest.approx(sum(cost(x.usage) for x in answers))
        info = ok(admin(b, "GET", "/key/info", key=key))["info"]
        assert info["spend"] == pytest.approx(sum(r["spend"] for r in rows))
        # A budget spent on one instance stops the key on the other within its poll: there
        # it spends what it answers in that time, not the budget once more.
        left = 1.0
        ok(admin(a, "POST", "/key/update", {"key": key, "max_budget": info["spend"] + left}))
        with pytest.raises(openai.RateLimitError):
            for _ in range(1000):
                chat(a, key)
        spent_b = 0.0
        with pytest.raises(openai.RateLimitError):
            for _ in range(1000):
                spent_b += cost(chat(b, key).usage)
        assert spent_b < left / 2
    finally:
        a.stop()
        b.stop()


def test_the_admin_api_lists_the_replicas_and_the_live_requests(store: Path) -> None:
    c = start_on(f"store: {{url: 'sqlite:///{store}'}}\n", profile="paced-500ms")
    try:
        key = ok(admin(c, "POST", "/key/generate", {}))["key"]
        with client(c, key) as sdk:
            stream = sdk.chat.completions.create(
                model="sim-llama",
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=100,
                stream=True,
            )
            next(iter(stream))  # running now: a token every half second
            live = ok(admin(c, "GET", "/admin/requests"))
            (replica,) = ok(admin(c, "GET", "/admin/replicas"))["replicas"]
            stream.close()
        assert live["running"] == 1 and live["queued"] == 0
        (request,) = live["requests"]
        assert request["model"] == "sim-llama" and request["state"] == "streaming"
        assert request["replica"] == replica["name"]
        assert replica["health"] == "up" and replica["inflight"] == 1
    finally:
        c.stop()


def test_keys_are_listed_by_pages(cluster: Cluster) -> None:
    made = [ok(admin(cluster, "POST", "/key/generate", {}))["token"] for _ in range(3)]
    first = ok(admin(cluster, "GET", "/key/list", size="2"))
    assert first == {"keys": made[:2], "total_count": 3, "current_page": 1, "total_pages": 2}
    second = ok(admin(cluster, "GET", "/key/list", size="2", page="2"))
    assert second["keys"] == made[2:]
    full = ok(admin(cluster, "GET", "/key/list", return_full_object="true"))
    assert [k["token"] for k in full["keys"]] == made
    bad = admin(cluster, "GET", "/key/list", size="101")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "size"
