"""How the gateway opens connections to sidecars: plaintext, or mutual TLS from
`gateway.link.tls` (gateway/tls.py re-reads the files when they change, so a link or call that
starts after a rotation presents the new certificate)."""

from __future__ import annotations

import ssl
from typing import Any

import grpc

from gateway.config.schema import LinkTls
from gateway.tls import TlsFiles

# The files of the configs in force lately (a reload may change the paths; old links keep
# theirs until they reconnect). A handful at most: the oldest go first.
_KEEP = 4
_files: dict[LinkTls, TlsFiles] = {}


def files(tls: LinkTls) -> TlsFiles:
    """The loaded files of `tls`; raises ValueError (naming the section) if they do not load."""
    found = _files.get(tls)
    if found is None:
        found = TlsFiles("gateway.link.tls", tls.cert_file, tls.key_file, tls.ca_file, server=False)
        while len(_files) >= _KEEP:
            del _files[next(iter(_files))]
        _files[tls] = found
    return found


def channel(address: str, tls: LinkTls | None, options: list[tuple[str, Any]]) -> grpc.aio.Channel:
    """A gRPC channel to a sidecar's Engine service."""
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options)
    if tls.server_name:
        options = [*options, ("grpc.ssl_target_name_override", tls.server_name)]
    return grpc.aio.secure_channel(address, files(tls).channel_credentials(), options=options)


def tcp_context(tls: LinkTls | None) -> ssl.SSLContext | None:
    """The SSL context of a new TCP link (None: plaintext)."""
    return None if tls is None else files(tls).context()
