"""Mutual TLS for the Dask cluster: the certificates, the address check, the client's Security.

A Dask scheduler reached over plain `tcp://` accepts any client that can open its port, and a
client can run any code on every worker: on a shared build network that is anyone who could
then change the binaries published under the project's name. With `tls://` addresses and
certificates from one CA that only the cluster's hosts hold, the scheduler, the workers and
the orchestrator each refuse a peer that cannot show such a certificate (Dask's TLS is
mutual: `ssl.CERT_REQUIRED` both ways). Dask does not check host names (`check_hostname` off,
the cluster has its own CA), so every certificate of the CA is as good as any other: the CA is
the trust boundary, and its key stays off the build network (docs/cluster.md).

- `make_certs`: `nightly cluster certs DIR --hosts a,b,c` (the `cryptography` package).
- `check_address`: `nightly run --cluster` refuses a plain address off loopback unless
  `[cluster] insecure = true`, and a `tls://` one without certificates.
- `security`: the `distributed.Security` of the orchestrator's client.

cryptography and distributed are imported inside the functions that use them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
import ssl
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightly.config import ClusterConfig
from nightly.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
    from cryptography.x509 import Certificate

CA_CERT = "ca.pem"
CA_KEY = "ca-key.pem"
ORCHESTRATOR = "orchestrator"
ENCRYPTED_SCHEMES = ("tls", "wss")
DEFAULT_DAYS = 825  # what browsers accept for a leaf; the cluster's CA is not theirs, but a
# certificate that expires makes a stolen one stop working some day
CA_DAYS = 3650

# A host name or a single label; IP addresses are recognised separately (ipaddress).
_HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                          r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


# ---------------------------------------------------------------------------- certificates


@dataclass(frozen=True, kw_only=True)
class Issued:
    name: str  # the host (or "orchestrator")
    cert: Path
    key: Path


@dataclass(frozen=True, kw_only=True)
class CertSet:
    folder: Path
    ca_cert: Path
    ca_key: Path
    ca_created: bool
    issued: tuple[Issued, ...]


def parse_hosts(text: str) -> list[str]:
    """`--hosts a,b,c`: host names or IP addresses, each once."""
    hosts = [h.strip() for h in text.split(",") if h.strip()]
    if not hosts:
        raise UsageError("--hosts is empty: name the build hosts, e.g. --hosts build1,build2")
    for h in hosts:
        if not _is_ip(h) and not _HOSTNAME_RE.match(h):
            raise UsageError(f"--hosts: {h!r} is neither a host name nor an IP address")
        if h in (ORCHESTRATOR, "ca"):
            raise UsageError(f"--hosts: {h!r} is reserved (the {h}'s own files); rename the host")
    dupes = sorted({h for h in hosts if hosts.count(h) > 1})
    if dupes:
        raise UsageError(f"--hosts names {', '.join(dupes)} more than once")
    return hosts


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def make_certs(folder: Path, hosts: Sequence[str], *, days: int = DEFAULT_DAYS) -> CertSet:
    """A CA (made once; reused when FOLDER already has one, to add hosts) and a certificate
    and key per host plus the orchestrator's. Existing host files are never overwritten.
    Keys are written 0600 and never printed."""
    from cryptography.hazmat.primitives.asymmetric import ec

    names = list(hosts)
    if not any((folder / f"{ORCHESTRATOR}{s}").exists() for s in (".pem", "-key.pem")):
        names.append(ORCHESTRATOR)  # made once, with the CA; hosts can be added later
    ca_cert_path, ca_key_path = folder / CA_CERT, folder / CA_KEY
    clash = [p for n in names for p in (folder / f"{n}.pem", folder / f"{n}-key.pem") if p.exists()]
    if clash:
        raise UsageError(
            f"{', '.join(str(p) for p in clash)} already exist: delete them to issue new ones, "
            "or leave those hosts out of --hosts"
        )
    if ca_cert_path.exists() != ca_key_path.exists():
        missing = ca_key_path if ca_cert_path.exists() else ca_cert_path
        raise UsageError(f"{missing} is missing: the CA needs both {CA_CERT} and {CA_KEY} to "
                         "issue certificates (or neither, to create a new CA)")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    # mkdir's mode is not applied to a folder that existed (nor past the umask): the folder
    # holds the CA's and the hosts' keys, so only its owner may list or enter it.
    os.chmod(folder, 0o700)
    created = not ca_cert_path.exists()
    if created:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _ca_certificate(ca_key)
        _write_key(ca_key_path, ca_key)
        _write_public(ca_cert_path, ca_cert)
    else:
        ca_key, ca_cert = _load_ca(ca_cert_path, ca_key_path)
    issued = []
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _leaf_certificate(name, key, ca_key, ca_cert, days)
        cert_path, key_path = folder / f"{name}.pem", folder / f"{name}-key.pem"
        _write_key(key_path, key)
        _write_public(cert_path, cert)
        issued.append(Issued(name=name, cert=cert_path, key=key_path))
    return CertSet(folder=folder, ca_cert=ca_cert_path, ca_key=ca_key_path, ca_created=created,
                   issued=tuple(issued))


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _ca_certificate(key: EllipticCurvePrivateKey) -> Certificate:
    import secrets

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    # A random serial in the name: two clusters' CAs never look alike.
    name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "nightly cluster"),
        x509.NameAttribute(NameOID.COMMON_NAME, f"nightly cluster CA {secrets.token_hex(4)}"),
    ])
    now = _now()
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    return (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=False, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )


def _leaf_certificate(name: str, key: Any, ca_key: Any, ca_cert: Any, days: int) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    alt: list[x509.GeneralName] = (
        [x509.IPAddress(ipaddress.ip_address(name))] if _is_ip(name) else [x509.DNSName(name)]
    )
    now = _now()
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "nightly cluster"),
            x509.NameAttribute(NameOID.COMMON_NAME, name),
        ]))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        # Every Dask process both listens and connects: server and client authentication.
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _load_ca(cert_path: Path, key_path: Path) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as e:
        # The library's message names the format problem, never the key's bytes.
        raise UsageError(f"cannot load the CA in {cert_path.parent}: {type(e).__name__}: {e}") from e
    if cert.public_key().public_numbers() != key.public_key().public_numbers():  # type: ignore[union-attr]
        raise UsageError(f"{key_path} is not the key of {cert_path}")
    return key, cert


def _write_key(path: Path, key: PrivateKeyTypes) -> None:
    """0600 from the first byte (O_EXCL: never through a file someone else created)."""
    from cryptography.hazmat.primitives import serialization

    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, data)
    finally:
        os.close(fd)


def _write_public(path: Path, cert: Certificate) -> None:
    from cryptography.hazmat.primitives import serialization

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, cert.public_bytes(serialization.Encoding.PEM))
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- the address


@dataclass(frozen=True, kw_only=True)
class TlsFiles:
    """[cluster] tls_ca_file, tls_cert, tls_key (None: not set)."""

    ca_file: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    @property
    def any(self) -> bool:
        return any(p is not None for p in (self.ca_file, self.cert, self.key))


def split_address(address: str) -> tuple[str, str]:
    """(scheme, host) of a Dask address as Dask itself parses it (the host it will connect
    to: a URL parser reads `tcp://192.0.2.2@127.0.0.1:8786` differently); no scheme means
    tcp, as in Dask."""
    from distributed.comm.addressing import get_address_host, parse_address

    try:
        scheme, loc = parse_address(address)
        scheme = scheme.lower()
        host = "" if scheme == "inproc" else str(get_address_host(f"{scheme}://{loc}"))
    except (ValueError, TypeError) as e:
        raise UsageError(f"cluster address {address!r} is not a Dask address: {e}") from e
    return scheme, host


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything, now or later


def check_address(
    address: str, files: TlsFiles, *, insecure: bool, require_encryption: bool, config: str
) -> None:
    """Refuse an address the night must not use. A plain address (tcp://) is fine on loopback
    (one machine: nobody else reaches it) or with `insecure = true`; a tls:// one needs the
    three TLS files."""
    scheme, host = split_address(address)
    encrypted = scheme in ENCRYPTED_SCHEMES
    if require_encryption and insecure:
        raise ConfigError("require_encryption = true and insecure = true exclude each other",
                          file=config, key="cluster.insecure", hint="drop one of them")
    if not encrypted and scheme != "inproc":
        if require_encryption:
            raise UsageError(
                f"cluster address {address} is not encrypted, and [cluster] require_encryption "
                "= true: use its tls:// address (with tls_ca_file, tls_cert, tls_key)")
        if not is_loopback(host) and not insecure:
            raise UsageError(
                f"refusing the unencrypted cluster address {address}: a Dask scheduler over "
                f"plain {scheme}:// accepts every client that reaches its port, and a client can "
                "run any code on every worker, so anyone on the build network could change the "
                "binaries this night publishes. Use the scheduler's tls:// address with [cluster] "
                "tls_ca_file, tls_cert and tls_key (make them with `nightly cluster certs DIR "
                "--hosts HOST,...`; docs/cluster.md), or set [cluster] insecure = true to accept "
                "the risk on a network only the build hosts share")
    if encrypted or files.any:
        check_files(files, config=config, address=address)


def check_files(files: TlsFiles, *, config: str, address: str) -> None:
    """All three set, readable, the key private to its owner, the certificate the key's."""
    for key, path in (("tls_ca_file", files.ca_file), ("tls_cert", files.cert),
                      ("tls_key", files.key)):
        if path is None:
            why = ("the other TLS settings are" if files.any
                   else f"{address} is a TLS address")
            raise ConfigError(
                f"is not set, but {why}", file=config, key=f"cluster.{key}",
                hint="set tls_ca_file, tls_cert and tls_key together: the cluster's CA, this "
                     "host's certificate and key (`nightly cluster certs DIR --hosts ...` makes "
                     "them)")
        if not path.is_file():
            raise ConfigError(f"{path} does not exist (or is not a file)", file=config,
                              key=f"cluster.{key}")
    assert files.key is not None
    assert files.cert is not None
    assert files.ca_file is not None
    mode = stat.S_IMODE(files.key.stat().st_mode)
    if mode & 0o077:
        raise ConfigError(
            f"{files.key} can be read by other users (mode {mode:04o}): a private key must not",
            file=config, key="cluster.tls_key", hint=f"chmod 600 {files.key}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.load_verify_locations(cafile=str(files.ca_file))
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"{files.ca_file} is not a PEM CA certificate ({e.__class__.__name__})",
                          file=config, key="cluster.tls_ca_file") from e
    try:
        ctx.load_cert_chain(str(files.cert), str(files.key))
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(
            f"{files.cert} and {files.key} are not a PEM certificate and its key "
            f"({e.__class__.__name__}: {getattr(e, 'reason', None) or 'unreadable'})",
            file=config, key="cluster.tls_cert") from e


def client_security(cc: ClusterConfig, address: str, *, config: str) -> object:
    """`nightly run --cluster ADDRESS`: check the address against [cluster]'s TLS settings
    (check_address), then the client's Security (None for a plain address)."""
    files = TlsFiles(ca_file=cc.tls_ca_file, cert=cc.tls_cert, key=cc.tls_key)
    check_address(address, files, insecure=cc.insecure,
                  require_encryption=cc.require_encryption, config=config)
    return security(files, require_encryption=cc.require_encryption)


def security(files: TlsFiles, *, require_encryption: bool) -> object:
    """The orchestrator's `distributed.Security` (None: plain, checked by check_address)."""
    if not files.any:
        return None
    from distributed.security import Security

    return Security(  # type: ignore[no-untyped-call]
        tls_ca_file=str(files.ca_file), tls_client_cert=str(files.cert),
        tls_client_key=str(files.key), require_encryption=require_encryption,
    )


__all__ = [
    "CertSet",
    "Issued",
    "TlsFiles",
    "check_address",
    "check_files",
    "client_security",
    "is_loopback",
    "make_certs",
    "parse_hosts",
    "security",
    "split_address",
]
