"""nightly.cluster.tls: `nightly cluster certs`, the cluster address check, the client's Security.

The certificates are checked with the ssl module (a TLS handshake between two of them over a
socket pair), not only by reading them back."""

from __future__ import annotations

import socket
import ssl
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nightly.cluster import tls
from nightly.errors import ConfigError, UsageError


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _handshake(server: tuple[Path, Path, Path], client: tuple[Path, Path, Path] | None) -> str:
    """A mutual-TLS handshake as Dask does it (CERT_REQUIRED both ways, no host names):
    "ok", or the server's error."""
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_verify_locations(cafile=str(server[0]))
    sctx.load_cert_chain(str(server[1]), str(server[2]))
    sctx.verify_mode = ssl.CERT_REQUIRED
    cctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cctx.check_hostname = False
    cctx.verify_mode = ssl.CERT_NONE  # what is tested here is the server's verdict
    if client is not None:
        cctx.load_cert_chain(str(client[1]), str(client[2]))
    a, b = socket.socketpair()
    outcome: dict[str, str] = {}

    def serve() -> None:
        try:
            with sctx.wrap_socket(a, server_side=True) as s:
                s.recv(1)
                outcome["server"] = "ok"
        except (ssl.SSLError, OSError) as e:
            outcome["server"] = f"{type(e).__name__}: {e}"

    t = threading.Thread(target=serve)
    t.start()
    try:
        with cctx.wrap_socket(b) as c:
            c.sendall(b"x")
            c.recv(1)  # TLS 1.3: the server's verdict on our certificate arrives here
    except (ssl.SSLError, OSError):
        pass
    t.join(10)
    return outcome["server"]


def test_certs_make_a_ca_and_a_working_pair_per_host(tmp_path: Path) -> None:
    made = tls.make_certs(tmp_path / "certs", ["build1", "10.0.0.5"], days=30)
    assert made.ca_created
    assert [i.name for i in made.issued] == ["build1", "10.0.0.5", "orchestrator"]
    assert _mode(tmp_path / "certs") == 0o700
    for i in made.issued:
        assert _mode(i.key) == 0o600
        assert _mode(i.cert) == 0o644
        assert i.key.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert _mode(made.ca_key) == 0o600
    files = {i.name: (made.ca_cert, i.cert, i.key) for i in made.issued}
    assert _handshake(files["build1"], files["orchestrator"]) == "ok"
    assert _handshake(files["10.0.0.5"], files["build1"]) == "ok"
    assert "did not return a certificate" in _handshake(files["build1"], None).lower()


def test_certs_make_an_existing_folder_private(tmp_path: Path) -> None:
    folder = tmp_path / "certs"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    tls.make_certs(folder, ["build1"], days=30)
    assert _mode(folder) == 0o700
    folder.chmod(0o775)  # adding a host to an existing CA tightens it again
    tls.make_certs(folder, ["build2"], days=30)
    assert _mode(folder) == 0o700


def test_a_garbled_address_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="is not a Dask address") as e:
        _check("nosuchscheme://10.0.0.5:8786")
    assert e.value.exit_code == 2


def test_certs_name_the_host_and_allow_both_directions(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    made = tls.make_certs(tmp_path, ["build1.example.com", "10.0.0.5"])
    by = {i.name: x509.load_pem_x509_certificate(i.cert.read_bytes()) for i in made.issued}
    ca = x509.load_pem_x509_certificate(made.ca_cert.read_bytes())
    for cert in by.values():
        cert.verify_directly_issued_by(ca)
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    san = by["build1.example.com"].extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert san.value.get_values_for_type(x509.DNSName) == ["build1.example.com"]
    san = by["10.0.0.5"].extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert [str(a) for a in san.value.get_values_for_type(x509.IPAddress)] == ["10.0.0.5"]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_certs_add_hosts_to_an_existing_ca_and_never_overwrite(tmp_path: Path) -> None:
    first = tls.make_certs(tmp_path, ["a"])
    ca_before = first.ca_cert.read_bytes()
    a_key = (tmp_path / "a-key.pem").read_bytes()
    second = tls.make_certs(tmp_path, ["b"])
    assert not second.ca_created
    assert [i.name for i in second.issued] == ["b"]  # the orchestrator's exists already
    assert first.ca_cert.read_bytes() == ca_before
    files = (first.ca_cert, tmp_path / "b.pem", tmp_path / "b-key.pem")
    assert _handshake(files, (first.ca_cert, tmp_path / "a.pem", tmp_path / "a-key.pem")) == "ok"
    with pytest.raises(UsageError, match=r"a\.pem.*already exist.*delete them"):
        tls.make_certs(tmp_path, ["a", "c"])
    assert (tmp_path / "a-key.pem").read_bytes() == a_key
    assert not (tmp_path / "c.pem").exists()  # nothing made when one host clashes
    (tmp_path / "ca-key.pem").unlink()
    with pytest.raises(UsageError, match=r"ca-key\.pem is missing"):
        tls.make_certs(tmp_path, ["d"])


def test_a_host_from_another_ca_is_refused(tmp_path: Path) -> None:
    ours = tls.make_certs(tmp_path / "ours", ["a"])
    theirs = tls.make_certs(tmp_path / "theirs", ["x"])
    server = (ours.ca_cert, tmp_path / "ours" / "a.pem", tmp_path / "ours" / "a-key.pem")
    stranger = (theirs.ca_cert, tmp_path / "theirs" / "x.pem", tmp_path / "theirs" / "x-key.pem")
    verdict = _handshake(server, stranger)
    assert verdict != "ok"
    assert "certificate verify failed" in verdict


@pytest.mark.parametrize(("text", "error"), [
    ("", "--hosts is empty"),
    ("a,,b, ", None),
    ("a,b,a", "more than once"),
    ("bad_name", "neither a host name nor an IP"),
    ("-x", "neither a host name nor an IP"),
    ("orchestrator", "reserved"),
    ("::1,fe80::2", None),
])
def test_hosts(text: str, error: str | None) -> None:
    if error is None:
        assert tls.parse_hosts(text) == [h.strip() for h in text.split(",") if h.strip()]
    else:
        with pytest.raises(UsageError, match=error):
            tls.parse_hosts(text)


def test_the_command_prints_paths_never_keys(tmp_path: Path, nightly: Callable[..., Any]) -> None:
    r = nightly("cluster", "certs", str(tmp_path / "c"), "--hosts", "build1,build2")
    assert r.code == 0, r.err
    assert "build2: copy ca.pem, build2.pem and build2-key.pem" in r.out
    assert "tls_key = " in r.out
    keys = [p.read_text() for p in (tmp_path / "c").glob("*-key.pem")]
    assert len(keys) == 4
    for k in keys:
        body = "".join(k.splitlines()[1:-1])
        assert body[:40] not in r.out + r.err
    assert "PRIVATE KEY" not in r.out + r.err
    r = nightly("cluster", "certs", str(tmp_path / "c"), "--hosts", "build1")
    assert r.code == 2
    assert "already exist" in r.err


# ---------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(("address", "scheme", "host", "loopback"), [
    ("tcp://127.0.0.1:8786", "tcp", "127.0.0.1", True),
    ("127.0.0.5:8786", "tcp", "127.0.0.5", True),
    ("tcp://localhost:8786", "tcp", "localhost", True),
    ("tcp://[::1]:8786", "tcp", "::1", True),
    ("tls://sched.example.com:8786", "tls", "sched.example.com", False),
    ("TCP://10.1.2.3:8786", "tcp", "10.1.2.3", False),
    ("tcp://0.0.0.0:8786", "tcp", "0.0.0.0", False),
    ("tcp://127.0.0.1.example.com:1", "tcp", "127.0.0.1.example.com", False),
    # Where a URL parser and Dask disagree, the host is Dask's (the one it connects to).
    ("tcp://192.0.2.2@127.0.0.1:8786", "tcp", "192.0.2.2@127.0.0.1", False),
    ("tcp://127.0.0.1#@192.0.2.2:8786", "tcp", "127.0.0.1#@192.0.2.2", False),
])
def test_split_address(address: str, scheme: str, host: str, loopback: bool) -> None:
    assert tls.split_address(address) == (scheme, host)
    assert tls.is_loopback(host) is loopback


@pytest.fixture
def pair(tmp_path: Path) -> tls.TlsFiles:
    tls.make_certs(tmp_path, ["h"])
    return tls.TlsFiles(ca_file=tmp_path / "ca.pem", cert=tmp_path / "orchestrator.pem",
                        key=tmp_path / "orchestrator-key.pem")


def _check(address: str, files: tls.TlsFiles | None = None, *, insecure: bool = False,
           require: bool = False) -> None:
    tls.check_address(address, files or tls.TlsFiles(), insecure=insecure,
                      require_encryption=require, config="n.toml")


def test_plain_addresses_off_loopback_are_refused_unless_insecure(pair: tls.TlsFiles) -> None:
    _check("tcp://127.0.0.1:8786")
    _check("localhost:8786")
    for address in ("tcp://10.0.0.5:8786", "sched:8786", "ws://10.0.0.5:8786",
                    "tcp://192.0.2.2@127.0.0.1:8786", "tcp://127.0.0.1#@192.0.2.2:8786"):
        with pytest.raises(UsageError) as e:
            _check(address)
        text = str(e.value)
        assert "run any code on every worker" in text
        for name in ("tls_ca_file", "tls_cert", "tls_key", "insecure = true", "nightly cluster certs"):
            assert name in text
        assert e.value.exit_code == 2
        _check(address, insecure=True)
        with pytest.raises(UsageError):  # certificates do not make plain tcp safe
            _check(address, pair)


def test_tls_addresses_need_the_three_files(pair: tls.TlsFiles, tmp_path: Path) -> None:
    _check("tls://sched.example.com:8786", pair)
    _check("tls://sched.example.com:8786", pair, require=True)
    with pytest.raises(ConfigError, match=r"cluster\.tls_ca_file.*is not set.*TLS address"):
        _check("tls://sched:8786")
    half = tls.TlsFiles(ca_file=pair.ca_file, cert=pair.cert)
    with pytest.raises(ConfigError, match=r"cluster\.tls_key.*other TLS settings"):
        _check("tcp://127.0.0.1:8786", half)
    missing = tls.TlsFiles(ca_file=tmp_path / "nope.pem", cert=pair.cert, key=pair.key)
    with pytest.raises(ConfigError, match=r"nope\.pem does not exist"):
        _check("tls://sched:8786", missing)
    with pytest.raises(UsageError, match="require_encryption"):
        _check("tcp://127.0.0.1:8786", pair, require=True)
    with pytest.raises(ConfigError, match="exclude each other"):
        _check("tls://sched:8786", pair, require=True, insecure=True)


def test_a_readable_or_wrong_key_is_refused(pair: tls.TlsFiles, tmp_path: Path) -> None:
    assert pair.key is not None
    pair.key.chmod(0o644)
    with pytest.raises(ConfigError, match=r"other users \(mode 0644\).*chmod 600") as e:
        _check("tls://sched:8786", pair)
    assert "PRIVATE" not in str(e.value)
    pair.key.chmod(0o600)
    wrong = tls.TlsFiles(ca_file=pair.ca_file, cert=tmp_path / "h.pem", key=pair.key)
    with pytest.raises(ConfigError, match=r"not a PEM certificate and its key"):
        _check("tls://sched:8786", wrong)
    bad_ca = tls.TlsFiles(ca_file=pair.key, cert=pair.cert, key=pair.key)
    with pytest.raises(ConfigError, match=r"not a PEM CA certificate") as e:
        _check("tls://sched:8786", bad_ca)
    assert pair.key.read_text().splitlines()[1] not in str(e.value)


def test_security_of_the_client(pair: tls.TlsFiles) -> None:
    assert tls.security(tls.TlsFiles(), require_encryption=False) is None
    sec: Any = tls.security(pair, require_encryption=True)  # distributed's Security
    assert sec.require_encryption is True
    assert sec.tls_ca_file == str(pair.ca_file)
    assert sec.tls_client_cert == str(pair.cert)
    assert sec.tls_client_key == str(pair.key)
    ctx = sec.get_connection_args("client")["ssl_context"]
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert str(pair.key) in repr(sec) or "tls_client_key" in repr(sec)
    assert "PRIVATE" not in repr(sec)


# ---------------------------------------------------------------------------- [cluster] keys


def test_cluster_tls_keys_load(write_config: Callable[..., Path], minimal_config_text: str) -> None:
    from nightly.config import load

    c = load(write_config(minimal_config_text))
    assert (c.cluster.tls_ca_file, c.cluster.tls_cert, c.cluster.tls_key) == (None, None, None)
    assert c.cluster.require_encryption is False
    assert c.cluster.insecure is False
    path = write_config(minimal_config_text + """
[cluster]
address = "tls://sched:8786"
tls_ca_file = "certs/ca.pem"
tls_cert = "/etc/nightly/orchestrator.pem"
tls_key = "certs/orchestrator-key.pem"
require_encryption = true
""")
    cc = load(path).cluster
    assert cc.tls_ca_file == path.parent / "certs" / "ca.pem"  # relative to the config file
    assert cc.tls_cert == Path("/etc/nightly/orchestrator.pem")
    assert cc.tls_key == path.parent / "certs" / "orchestrator-key.pem"
    assert cc.require_encryption is True
    with pytest.raises(ConfigError, match=r"cluster\.tls_crt.*tls_cert"):
        load(write_config(minimal_config_text + '[cluster]\ntls_crt = "x.pem"\n'))
    with pytest.raises(ConfigError, match=r"cluster\.insecure"):
        load(write_config(minimal_config_text + '[cluster]\ninsecure = "yes"\n'))
