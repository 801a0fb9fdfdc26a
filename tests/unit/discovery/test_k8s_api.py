from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config.discovery import KubernetesDiscovery
from gateway.discovery.k8s_api import KubeApi, in_cluster_url


def test_in_cluster_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    assert in_cluster_url() == "https://10.96.0.1:6443"
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    assert in_cluster_url() == "https://[fd00::1]:6443"


def test_outside_a_cluster_without_api_url_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ValueError, match="KUBERNETES_SERVICE_HOST is not set"):
        KubeApi(KubernetesDiscovery(service="s"))


def test_the_endpointslice_url_and_selector(tmp_path: Path) -> None:
    api = KubeApi(KubernetesDiscovery(service="sc", namespace="ns", api_url="http://h:1/"))
    assert api.url == "http://h:1/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices"
    assert api.selector == "kubernetes.io/service-name=sc"


def test_the_gateway_command_outside_a_cluster_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr("gateway.cli._logging", lambda level, json: None)  # the process's own
    config = tmp_path / "gw.yaml"
    config.write_text(
        "gateway: {http: {port: 0}, grpc: {port: 0}, json_logs: false}\n"
        "discovery: {mode: kubernetes, kubernetes: {service: shardgate-sidecar}}\n"
    )
    assert main(["check-config", str(config)]) == 0  # valid: where it runs is not checked here
    assert main(["gateway", "--config", str(config)]) == 2
    assert "KUBERNETES_SERVICE_HOST is not set" in capsys.readouterr().err
