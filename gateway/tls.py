"""Certificates from files, re-read when the files change (cert-manager rotates them in place).

`TlsFiles` holds one certificate, its key and (optionally) the CA that peers' certificates must
chain to. Every user asks for what it needs when a connection starts (an `ssl.SSLContext` for
asyncio, gRPC credentials), and `refresh()` first compares the files' stamps (inode, size,
mtime) with those of the last load: a changed file is read again and the new certificate is used
from the next handshake on; connections already open keep theirs. A rotation caught half-written
(a key that does not match its certificate) keeps the previous certificate in force, warns, and
is tried again on the next connection.

Servers that asyncio runs (the sidecar's TCP link and metrics port, the gateway's HTTP edge) are
given `front_context()`: an SSL context whose SNI callback, called at the start of every
handshake whether or not the client names a server, puts the current context in its place.
gRPC servers get `server_credentials()`, whose fetcher gRPC calls at every handshake.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

log = logging.getLogger(__name__)

Stamp = tuple[tuple[int, int, int], ...]
_UNREADABLE: Stamp = ()  # a file missing or unreadable for the moment


@dataclass(frozen=True, slots=True)
class Loaded:
    """One reading of the files."""

    version: int
    cert: bytes
    key: bytes
    ca: bytes | None
    context: ssl.SSLContext


class TlsFiles:
    """`server`: this side accepts connections (with `ca_file`: peers must present a certificate
    signed by it); else it opens them (and `ca_file` is what the server's certificate must chain
    to). Raises ValueError, naming `what`, when the files cannot be loaded at first."""

    def __init__(
        self,
        what: str,
        cert_file: str,
        key_file: str,
        ca_file: str | None = None,
        *,
        server: bool,
    ) -> None:
        self.what = what
        self.server = server
        self._paths = [Path(p) for p in (cert_file, key_file, *([ca_file] if ca_file else []))]
        self._has_ca = ca_file is not None
        self._lock = threading.Lock()  # gRPC calls the fetcher from its own threads
        self._failed: Stamp | None = None  # the files as they were when they did not load
        try:
            self._stamp = self._read_stamp()
            self._loaded = self._load(1)
        except (OSError, ssl.SSLError, ValueError) as e:
            raise ValueError(f"{what}: cannot load the certificate files: {e}") from None

    # -- reading the files -------------------------------------------------------------------
    def _read_stamp(self) -> Stamp:
        stats = [os.stat(p) for p in self._paths]
        return tuple((st.st_ino, st.st_size, st.st_mtime_ns) for st in stats)

    def _load(self, version: int) -> Loaded:
        cert, key, *rest = (p.read_bytes() for p in self._paths)
        ca = rest[0] if rest else None
        purpose = ssl.PROTOCOL_TLS_SERVER if self.server else ssl.PROTOCOL_TLS_CLIENT
        ctx = ssl.SSLContext(purpose)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self._paths[0], self._paths[1])  # also checks the key matches
        if ca is not None:
            ctx.load_verify_locations(cadata=ca.decode("ascii", "replace"))
            ctx.verify_mode = ssl.CERT_REQUIRED
        elif not self.server:
            ctx.load_default_certs()
        return Loaded(version, cert, key, ca, ctx)

    def refresh(self) -> Loaded:
        """The certificate in force, read again first if a file changed since the last load."""
        with self._lock:
            try:
                stamp = self._read_stamp()
            except OSError as e:
                return self._keep(_UNREADABLE, e)
            if stamp == self._stamp:
                self._failed = None
                return self._loaded
            if stamp == self._failed:
                return self._loaded
            try:
                loaded = self._load(self._loaded.version + 1)
            except (OSError, ssl.SSLError, ValueError) as e:
                return self._keep(stamp, e)
            self._loaded, self._stamp, self._failed = loaded, stamp, None
            log.info("%s: certificate files changed: loaded them again", self.what)
            return loaded

    def _keep(self, stamp: Stamp, error: Exception) -> Loaded:
        """The files changed into what does not load: warn once per state of the files."""
        if stamp != self._failed:
            log.warning(
                "%s: cannot load the changed certificate files (%s); the previous "
                "certificate stays in force",
                self.what,
                error,
            )
        self._failed = stamp
        return self._loaded

    # -- what connections use ----------------------------------------------------------------
    def context(self) -> ssl.SSLContext:
        """For a connection about to open (client) or a handshake starting (server)."""
        return self.refresh().context

    def front_context(self) -> ssl.SSLContext:
        """For an asyncio server: each handshake swaps in the current context."""
        front = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        front.minimum_version = ssl.TLSVersion.TLSv1_2
        if self._has_ca:
            front.verify_mode = ssl.CERT_REQUIRED

        def swap(conn: ssl.SSLObject, _name: str | None, _ctx: ssl.SSLContext) -> None:
            conn.context = self.context()

        front.sni_callback = swap
        # The front context also holds a certificate, so that it is valid on its own.
        loaded = self.refresh()
        front.load_cert_chain(self._paths[0], self._paths[1])
        if loaded.ca is not None:
            front.load_verify_locations(cadata=loaded.ca.decode("ascii", "replace"))
        return front

    def channel_credentials(self) -> grpc.ChannelCredentials:
        loaded = self.refresh()
        return grpc.ssl_channel_credentials(loaded.ca, loaded.key, loaded.cert)

    def server_credentials(self) -> grpc.ServerCredentials:
        """For a gRPC server; with a CA, clients without a certificate it signed are refused."""
        loaded = self.refresh()
        self._fetched = loaded.version
        return grpc.dynamic_ssl_server_credentials(
            _grpc_config(loaded),
            self._fetch,
            require_client_authentication=self._has_ca,
        )

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        loaded = self.refresh()
        if loaded.version == self._fetched:
            return None
        self._fetched = loaded.version
        return _grpc_config(loaded)


def _grpc_config(loaded: Loaded) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration([(loaded.key, loaded.cert)], loaded.ca)
