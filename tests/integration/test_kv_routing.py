"""Precise prefix routing end to end: sim sidecars report what their prefix caches hold, the
gateway routes on it, and its index recovers from a link cut and a sidecar restart."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import httpx
import openai
import pytest
from shardgate.v1 import engine_pb2 as pb
from shardgate.v1 import engine_pb2_grpc as pb_grpc
from shardgate.v1 import params
from shardgate.v1.kvblocks import block_names, start

from engine_sidecar.backend import EngineRequest
from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.backends.sim.engine import SimBackend
from engine_sidecar.server import Sidecar
from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.integration.test_failover import kill_sidecar, restart

SYSTEM = " ".join(["the river runs past the old mill and the stone bridge"] * 30)
MODEL = "sim-llama"


@pytest.fixture(params=["auto", "grpc"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    sim = SimConfig(model=MODEL, profile="fast", max_num_seqs=8)
    c = Cluster(
        f"gateway: {{default_max_tokens: 8, link: {{transport: {request.param}}}}}",
        [{"sim": sim}, {"sim": sim}, {"sim": sim}],
    )
    c.start()
    yield c
    c.stop()


def chat(user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def prompt_names(user: str) -> list[int]:
    """The blocks of the conversation's prompt, as the sims name them."""
    g = generation(user)
    ids = SimBackend(SimConfig(model=MODEL)).tokenize(EngineRequest(1, g))
    return block_names(ids, 16, start(MODEL))


def generation(user: str) -> params.Generation:
    return params.Generation(
        request_id="direct",
        model=MODEL,
        messages=tuple(params.Message(role=m["role"], content=m["content"]) for m in chat(user)),
        sampling=params.Sampling(max_tokens=2, ignore_eos=True),
    )


async def generate_directly(sidecar: Sidecar, user: str) -> None:
    """Run a request on the sidecar itself, past the gateway: only its engine knows."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sidecar.port}") as ch:
        stub = pb_grpc.EngineStub(ch)
        req = pb.SubmitRequest(key=1, generation=params.encode(generation(user)))
        async for d in stub.Generate(req, timeout=10):
            if d.finish:
                break


def replica_of(c: Cluster, user: str) -> int:
    client = openai.OpenAI(base_url=f"{c.http_url}/v1", api_key="none", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=chat(user),  # type: ignore[arg-type]
        max_tokens=2,
    )
    client.close()
    address = raw.headers["x-shardgate-replica"]
    [i] = [k for k, s in enumerate(c.sidecars) if f"127.0.0.1:{s.port}" == address]
    return i


def held(c: Cluster, i: int, names: list[int]) -> int:
    """The leading blocks of `names` the gateway's index says sidecar `i` holds (read on the
    cluster's loop, which changes it)."""

    async def read() -> int:
        assert c.gateway is not None
        index = c.gateway.fleet.kv.caches.index
        index.speculative_s = 0.0  # (what the engines say only: no guess of the gateway's)
        return index.matched(names, 0.0).get(c.sidecars[i].config.name, 0)

    return c.run(read())


def test_a_request_goes_where_the_engine_holds_its_prefix_though_the_gateway_never_sent_it(
    cluster: Cluster,
) -> None:
    c = cluster
    names = prompt_names("first question")
    assert len(names) > 20
    for i in range(3):
        until(lambda i=i: held(c, i, names) == 0, what="the snapshot of an empty cache")
    c.run(generate_directly(c.sidecars[2], "first question"))
    # The engine caches the prompt's whole blocks; its events reach the gateway's index.
    until(lambda: held(c, 2, names) >= len(names) - 1, what="sim-2's blocks in the index")
    assert held(c, 0, names) == held(c, 1, names) == 0
    # Another turn of the same conversation shares the prefix: it goes to sim-2.
    assert replica_of(c, "second question") == 2
    assert replica_of(c, "third question") == 2
    metrics = scrape(c)
    assert metrics["shardgate_kv_routed_requests_total"] == 2
    assert metrics['shardgate_kv_matched_tokens_total{on="chosen"}'] >= 2 * 16 * (len(names) - 1)
    assert (
        metrics['shardgate_kv_matched_tokens_total{on="chosen"}']
        == metrics['shardgate_kv_matched_tokens_total{on="best"}']
    )
    assert metrics["shardgate_kv_events_total"] >= len(names)
    assert metrics["shardgate_kv_snapshots_total"] >= 3  # (each link's first message)
    assert metrics['shardgate_kv_replica_blocks{replica="sim-2"}'] >= len(names) - 1


def scrape(c: Cluster) -> dict[str, float]:
    body = httpx.get(f"{c.http_url}/metrics", timeout=10).text
    out = {}
    for line in body.splitlines():
        if line.startswith("shardgate_kv_"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_the_index_recovers_after_a_link_cut_and_a_sidecar_restart(cluster: Cluster) -> None:
    c = cluster
    assert c.gateway is not None
    names = prompt_names("first question")
    c.run(generate_directly(c.sidecars[1], "first question"))
    until(lambda: held(c, 1, names) >= len(names) - 1, what="sim-1's blocks in the index")

    # The link is cut (the engine keeps its cache): the gateway forgets, then the new link's
    # snapshot says it all again.
    caches = c.gateway.fleet.kv.caches
    snapshots = caches.snapshots
    for session in list(c.sidecars[1].servicer.sessions):
        c.run(_close(session))
    until(lambda: caches.snapshots > snapshots, what="the new link's snapshot")
    assert held(c, 1, names) >= len(names) - 1
    until(lambda: routable(c, 1), what="sim-1 routable again")
    assert replica_of(c, "second question") == 1

    # The sidecar restarts: a new engine holds nothing, and neither does the index for it.
    snapshots = caches.snapshots
    kill_sidecar(c, f"127.0.0.1:{c.sidecars[1].port}")
    restart(c, 1)
    until(lambda: caches.snapshots > snapshots and routable(c, 1), what="sim-1 back")
    assert held(c, 1, names) == 0
    c.run(generate_directly(c.sidecars[1], "first question"))
    until(lambda: held(c, 1, names) >= len(names) - 1, what="sim-1's blocks again")
    assert replica_of(c, "second question") == 1


def routable(c: Cluster, i: int) -> bool:
    """Sidecar `i` is routable, as the gateway sees it once it has handled every link event."""

    async def read() -> bool:
        assert c.gateway is not None
        fleet, name = c.gateway.fleet, c.sidecars[i].config.name
        return not len(fleet.events) and any(
            r.routable and r.name == name for r in fleet.pool(MODEL)
        )

    return c.run(read())


async def _close(session: object) -> None:
    session.close()  # type: ignore[attr-defined]


def test_the_usage_says_what_the_engine_found_cached(cluster: Cluster) -> None:
    c = cluster
    client = openai.OpenAI(base_url=f"{c.http_url}/v1", api_key="none", max_retries=0)
    first = client.chat.completions.create(model=MODEL, messages=chat("once"), max_tokens=2)  # type: ignore[arg-type]
    again = client.chat.completions.create(model=MODEL, messages=chat("twice"), max_tokens=2)  # type: ignore[arg-type]
    client.close()
    assert first.usage is not None and again.usage is not None
    details = again.usage.prompt_tokens_details
    # (the second goes where the first's prefix is cached: its whole blocks are found there)
    assert details is not None and details.cached_tokens is not None
    assert details.cached_tokens >= 16 * (len(prompt_names("twice")) - 1)
