"""gateway/tls.py: certificate files loaded, checked, and read again when they change."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from gateway.tls import TlsFiles
from tests.certs import Pair, Pki, make_pki, replace


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def installed(pki: Pki, folder: Path) -> Pair:
    """The client's certificate copied to files of its own, to be replaced by the tests."""
    pair = Pair(folder / "tls.crt", folder / "tls.key")
    replace(pki.client.cert_file, pair.cert_file)
    replace(pki.client.key_file, pair.key_file)
    return pair


def client(pair: Pair, pki: Pki) -> TlsFiles:
    return TlsFiles(
        "t", str(pair.cert_file), str(pair.key_file), str(pki.ca.cert_file), server=False
    )


@pytest.mark.parametrize(
    ("cert", "key", "ca"),
    [
        ("client.crt", "missing.key", "ca.crt"),  # a file that is not there
        ("client.crt", "other.key", "ca.crt"),  # a key of another certificate
        ("client.crt", "client.key", "client.key"),  # a CA file that holds no certificate
    ],
)
def test_files_that_cannot_load_are_refused_by_name(
    pki: Pki, tmp_path: Path, cert: str, key: str, ca: str
) -> None:
    files = {
        "client.crt": pki.client.cert_file,
        "client.key": pki.client.key_file,
        "other.key": pki.other_client.key_file,
        "ca.crt": pki.ca.cert_file,
        "missing.key": tmp_path / "missing.key",
    }
    with pytest.raises(ValueError, match=r"^gateway\.link\.tls: cannot load the certificate"):
        TlsFiles(
            "gateway.link.tls",
            str(files[cert]),
            str(files[key]),
            str(files[ca]),
            server=False,
        )


def test_unchanged_files_are_not_read_again(pki: Pki, tmp_path: Path) -> None:
    tls = client(installed(pki, tmp_path), pki)
    first = tls.refresh()
    assert tls.refresh() is first
    assert first.context.verify_mode == ssl.CERT_REQUIRED


def test_replaced_files_are_loaded_at_the_next_refresh(pki: Pki, tmp_path: Path) -> None:
    pair = installed(pki, tmp_path)
    tls = client(pair, pki)
    before = tls.refresh()
    replace(pki.other_client.cert_file, pair.cert_file)
    replace(pki.other_client.key_file, pair.key_file)
    after = tls.refresh()
    assert after.version == before.version + 1
    assert after.cert == pki.other_client.cert_file.read_bytes()
    assert after.key == pki.other_client.key_file.read_bytes()


def test_a_half_done_rotation_keeps_the_previous_certificate(pki: Pki, tmp_path: Path) -> None:
    pair = installed(pki, tmp_path)
    tls = client(pair, pki)
    before = tls.refresh()
    replace(pki.other_client.cert_file, pair.cert_file)  # its key not there yet
    assert tls.refresh() is before
    pair.key_file.unlink()  # and a file missing for a moment
    assert tls.refresh() is before
    replace(pki.other_client.key_file, pair.key_file)
    after = tls.refresh()
    assert after.cert == pki.other_client.cert_file.read_bytes()
    assert after.version == before.version + 1


def test_a_server_without_a_ca_asks_no_client_certificate(pki: Pki) -> None:
    edge = TlsFiles("edge", str(pki.server.cert_file), str(pki.server.key_file), server=True)
    assert edge.context().verify_mode == ssl.CERT_NONE
    assert edge.front_context().verify_mode == ssl.CERT_NONE
    sidecar = TlsFiles(
        "sidecar",
        str(pki.server.cert_file),
        str(pki.server.key_file),
        str(pki.ca.cert_file),
        server=True,
    )
    assert sidecar.context().verify_mode == ssl.CERT_REQUIRED
    assert sidecar.front_context().verify_mode == ssl.CERT_REQUIRED
