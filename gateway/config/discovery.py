"""Where the gateway finds its sidecars: the config's list, DNS, or Kubernetes EndpointSlices."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

Seconds = Annotated[float, msgspec.Meta(gt=0)]
Port = Annotated[int, msgspec.Meta(gt=0, le=65535)]

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


class _Base(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


class DnsDiscovery(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # A headless Service's name (one A/AAAA record per ready pod), and the sidecars' port;
    # with `srv`, an SRV name (`_grpc._tcp.<service>.<namespace>.svc.cluster.local`) whose
    # records give each sidecar's host and port (needs dnspython: the `dns` extra).
    name: Annotated[str, msgspec.Meta(min_length=1)]
    port: Port | None = None
    srv: bool = False
    interval_s: Seconds = 5.0
    # One resolution must answer within this long, else it counts as a failed one.
    timeout_s: Seconds = 2.0

    def __post_init__(self) -> None:
        if self.port is None and not self.srv:
            raise ValueError("discovery.dns: `port` is needed (or `srv: true`)")


class KubernetesDiscovery(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # The Service whose EndpointSlices list the sidecars (label kubernetes.io/service-name).
    service: Annotated[str, msgspec.Meta(min_length=1)]
    # Absent: the pod's own namespace (the service account's `namespace` file), else "default".
    namespace: str | None = None
    # The EndpointSlice port the gateway connects to (the sidecar's gRPC port).
    port_name: str = "grpc"
    address_type: Literal["IPv4", "IPv6"] = "IPv4"
    # A full list this often whatever the watch says (a missed event is repaired by then).
    resync_s: Seconds = 60.0
    # `timeoutSeconds` of each watch; a watch that sends nothing past it (and a grace of
    # `request_timeout_s`) is taken for silent and the slices are listed again.
    watch_timeout_s: Annotated[int, msgspec.Meta(gt=0)] = 50
    # Connect and list deadline.
    request_timeout_s: Seconds = 10.0
    # After a failure, the next list waits this long, doubling up to `retry_max_s`.
    retry_min_s: Seconds = 0.5
    retry_max_s: Seconds = 30.0
    # Absent: in-cluster (https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT).
    api_url: str | None = None
    # Read again for every request (projected tokens rotate); absent file: no Authorization.
    token_file: str = f"{SERVICE_ACCOUNT}/token"
    # The API server's CA (https only); absent file: the system's CAs.
    ca_file: str = f"{SERVICE_ACCOUNT}/ca.crt"


class DiscoverySettings(_Base, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # static: the `sidecars:` list; dns and kubernetes: discovered (and `sidecars:` empty).
    mode: Literal["static", "dns", "kubernetes"] = "static"
    dns: DnsDiscovery | None = None
    kubernetes: KubernetesDiscovery | None = None

    def __post_init__(self) -> None:
        if self.mode == "dns" and self.dns is None:
            raise ValueError("discovery: mode dns needs a `dns:` section (name, port)")
        if self.mode == "kubernetes" and self.kubernetes is None:
            raise ValueError("discovery: mode kubernetes needs a `kubernetes:` section (service)")
