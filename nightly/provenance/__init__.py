"""Signed provenance: an in-toto Statement v1 with a SLSA Provenance v1 predicate per package,
in a DSSE envelope signed with the site's key, written beside the package as
`<file>.provenance.json` (JSON Lines: one envelope a line).

The statement says what a user needs to trust a download: the file (name and sha256), the
source (URL, commit, branch), how it was built (build id, package type, Python, CUDA, the
recipe and its sha256, the image and its digest, the executor, the machine or worker,
SOURCE_DATE_EPOCH, start and finish) and, where known, the resolved build dependencies (the
night's wheelhouse). DSSE, keys and signatures are securesystemslib's (the `provenance`
extra); nothing here does cryptography by hand. The library is imported inside the functions
that need it, so a site without provenance never loads it.

Signing happens where the package is verified: after the build phase, on the machine that
runs the night (in cluster mode the orchestrator, after staging verification); a worker never
sees the key.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nightly.errors import ConfigError, UsageError
from nightly.jsonvalues import json_object, loads_bounded
from nightly.redact import SECRET_RE, safe_url

SUFFIX = ".provenance.json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:nightly:build:v1"
BUILDER_ID = "urn:nightly:builder"
PRIVATE_NAME = "provenance.key"
PUBLIC_NAME = "provenance.pub"
SCHEMES = ("ed25519", "ecdsa-p256")


class ProvenanceError(UsageError):
    """A key pair that cannot be made where asked (exit 2: the user's to fix)."""


def _crypto_missing(e: ImportError) -> UsageError:
    return UsageError(
        f"signed provenance needs securesystemslib with its crypto extra ({e}): "
        "pip install 'nightly-builds[provenance]'"
    )


# ----------------------------------------------------------------------------- keys


def keygen(folder: Path, scheme: str = "ed25519") -> tuple[Path, Path]:
    """A key pair in `folder`: provenance.key (PKCS#8 PEM, mode 0600, written so no other
    user can ever read it) and provenance.pub (PEM). Refuses to overwrite a private key."""
    try:
        from cryptography.hazmat.primitives import serialization
        from securesystemslib.signer import CryptoSigner  # type: ignore[attr-defined]
    except ImportError as e:
        raise _crypto_missing(e) from e
    if scheme not in SCHEMES:
        raise UsageError(f"unknown key scheme '{scheme}': use one of {', '.join(SCHEMES)}")
    private, public = folder / PRIVATE_NAME, folder / PUBLIC_NAME
    _key_folder(folder)
    for path in (private, public):
        if os.path.lexists(path):  # a file, or a link (dangling too): never written through
            what = "a symbolic link" if path.is_symlink() else "already there"
            raise ProvenanceError(f"{path} is {what}: move it away first (keys are never "
                                  "overwritten, and never written through a link)")
    signer = CryptoSigner.generate_ed25519() if scheme == "ed25519" else CryptoSigner.generate_ecdsa()
    key = serialization.load_pem_private_key(signer.private_bytes, password=None)
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _create(private, signer.private_bytes, 0o600)
    _create(public, pem, 0o644)
    return private, public


def _key_folder(folder: Path) -> None:
    """DIR for a key pair: created 0700 when it is not there; a folder (not a link to one)
    when it is. ProvenanceError otherwise."""
    if folder.is_symlink():
        raise ProvenanceError(f"{folder} is a symbolic link: give the folder itself")
    if os.path.lexists(folder) and not folder.is_dir():
        raise ProvenanceError(f"{folder} is not a folder: give a folder for the key pair "
                              "(it is created, mode 0700, when missing)")
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise ProvenanceError(f"cannot create {folder}: {e.strerror}") from e


def _create(path: Path, data: bytes, mode: int) -> None:
    """A new file (never an existing one, never through a link) with `mode`."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except OSError as e:
        raise ProvenanceError(f"cannot create {path}: {e.strerror}") from e
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), mode)  # whatever the umask
        f.write(data)


def load_signer(path: Path) -> Any:
    """A securesystemslib signer from a PEM private key (Ed25519 or ECDSA P-256)."""
    try:
        from cryptography.hazmat.primitives import serialization
        from securesystemslib.signer import CryptoSigner  # type: ignore[attr-defined]
    except ImportError as e:
        raise _crypto_missing(e) from e
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        return CryptoSigner(key)
    except (OSError, ValueError, TypeError) as e:
        # Never the key's bytes in a message: only where it is and what is wrong.
        raise ConfigError(
            f"cannot read the provenance signing key {path}: {type(e).__name__}",
            key="provenance.key",
            hint="point [provenance] key at a PEM private key (nightly provenance keygen DIR)",
        ) from e


def load_public_key(path: Path) -> object:
    """A securesystemslib public key from a PEM file."""
    try:
        from securesystemslib.signer import SSlibKey  # type: ignore[attr-defined]
    except ImportError as e:
        raise _crypto_missing(e) from e
    try:
        pem = path.read_bytes()
        if b"PRIVATE KEY" in pem:
            raise ValueError("this is a private key; give the public one (provenance.pub)")
        from cryptography.hazmat.primitives import serialization

        public = serialization.load_pem_public_key(pem)
        return SSlibKey.from_crypto(public)
    except (OSError, ValueError, TypeError) as e:
        raise UsageError(f"cannot read the public key {path}: {e} (give the provenance.pub "
                         "that `nightly provenance keygen` wrote)") from e


# ----------------------------------------------------------------------------- statements


@dataclass(frozen=True, kw_only=True)
class BuildFacts:
    """What one package's provenance states (all strings already free of secrets)."""

    name: str
    sha256: str
    source_url: str
    commit: str
    branch: str
    build_id: str
    package: str
    python: str
    cuda: str
    variant: str = ""
    recipe: str = ""
    recipe_sha256: str = ""
    image: str = ""
    image_digest: str = ""
    executor: str = ""
    machine: str = ""
    source_date_epoch: str = ""
    started: float | None = None
    finished: float | None = None
    nightly_version: str = ""
    dependencies: Sequence[tuple[str, str]] = field(default_factory=tuple)  # (name, sha256)
    invocation: str = ""  # the night's day and channel, e.g. "2024_05_01/nightly"


def _clean(value: str) -> str:
    """No credential in a statement: URL user info dropped, secret-looking words masked."""
    return "***" if SECRET_RE.search(value) and "=" in value else safe_url(value)


def _rfc3339(t: float | None) -> str | None:
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def statement(f: BuildFacts) -> dict[str, object]:
    """The in-toto Statement v1 with its SLSA Provenance v1 predicate."""
    params = {
        "buildId": f.build_id, "package": f.package, "python": f.python, "cuda": f.cuda,
        "variant": f.variant, "recipe": f.recipe, "recipeSha256": f.recipe_sha256,
        "image": _clean(f.image), "imageDigest": f.image_digest,
        "sourceDateEpoch": f.source_date_epoch,
    }
    source = {"uri": _clean(f.source_url), "digest": {"gitCommit": f.commit} if f.commit else {},
              "annotations": {"branch": f.branch}}
    deps = [source] + [{"uri": name, "digest": {"sha256": sha}} for name, sha in f.dependencies]
    meta = {k: v for k, v in (("startedOn", _rfc3339(f.started)),
                              ("finishedOn", _rfc3339(f.finished))) if v}
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": f.name, "digest": {"sha256": f.sha256}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {k: v for k, v in params.items() if v},
                "internalParameters": {"executor": f.executor, "invocation": f.invocation},
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID,
                            "version": {"nightly": f.nightly_version, "machine": _clean(f.machine)}},
                "metadata": {"invocationId": f"{f.invocation}/{f.build_id}", **meta},
            },
        },
    }


def sign(stmt: Mapping[str, Any], signer: Any) -> bytes:
    """The statement in a DSSE envelope signed by `signer`, as one JSON line."""
    from securesystemslib.dsse import Envelope

    payload = json.dumps(stmt, sort_keys=True, separators=(",", ":")).encode()
    env = Envelope(payload=payload, payload_type=PAYLOAD_TYPE, signatures={})
    env.sign(signer)
    return json.dumps(env.to_dict(), sort_keys=True, separators=(",", ":")).encode() + b"\n"


def write(package: Path, facts: BuildFacts, signer: object) -> Path:
    """`<package>.provenance.json` beside the package, replaced atomically."""
    dest = package.with_name(package.name + SUFFIX)
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_bytes(sign(statement(facts), signer))
    os.chmod(tmp, 0o644)
    os.replace(tmp, dest)
    return dest


# ----------------------------------------------------------------------------- verifying


@dataclass(frozen=True, kw_only=True)
class Verdict:
    ok: bool
    reason: str = ""  # why not, in words, when not ok
    summary: tuple[str, ...] = ()  # the provenance in short human form


def _envelopes(bundle: bytes) -> list[Any]:
    from securesystemslib.dsse import Envelope

    out = []
    for line in bundle.decode("utf-8", "replace").splitlines():
        if line.strip():
            data = loads_bounded(line)  # a ValueError when it is no JSON (or past a bound)
            if not isinstance(data, dict):
                raise ValueError("a provenance line that is not a JSON object")
            out.append(Envelope.from_dict(data))
    if not out:
        raise ValueError("the provenance file holds no envelope")
    return out


def describe(stmt: Mapping[str, Any]) -> tuple[str, ...]:
    """A few lines a person reads: file, source, how and where it was built."""
    pred = stmt.get("predicate", {})
    bd, rd = pred.get("buildDefinition", {}), pred.get("runDetails", {})
    ext = bd.get("externalParameters", {})
    src = (bd.get("resolvedDependencies") or [{}])[0]
    commit = src.get("digest", {}).get("gitCommit", "") or "(plain folder, no commit)"
    branch = src.get("annotations", {}).get("branch", "")
    image = ext.get("image", "") or "host"
    if ext.get("imageDigest"):
        image += f" @ {ext['imageDigest']}"
    md = rd.get("metadata", {})
    executor = bd.get("internalParameters", {}).get("executor", "?")
    return (
        f"source:  {src.get('uri', '?')} {commit}" + (f" ({branch})" if branch else ""),
        f"build:   {ext.get('buildId', '?')} in {image} by {executor}"
        f" on {rd.get('builder', {}).get('version', {}).get('machine', '?')}",
        f"recipe:  {ext.get('recipe', '?')} sha256 {ext.get('recipeSha256', '?')[:16]}",
        f"when:    {md.get('startedOn', '?')} .. {md.get('finishedOn', '?')}"
        f" (SOURCE_DATE_EPOCH {ext.get('sourceDateEpoch', '?')})",
    )


def verify(name: str, sha256: str, bundle: bytes | None, key: Any, *,
           source_commit: str | None = None) -> Verdict:
    """Does `bundle` prove that the file `name` with this sha256 is what nightly built?"""
    from securesystemslib.exceptions import VerificationError

    if bundle is None:
        return Verdict(ok=False, reason=f"no provenance: {name}{SUFFIX} is missing")
    try:
        envelopes = _envelopes(bundle)
    except (ValueError, KeyError, TypeError) as e:
        return Verdict(ok=False, reason=f"the provenance is not a DSSE envelope bundle: {e}")
    why = "no envelope"
    for env in envelopes:
        if env.payload_type != PAYLOAD_TYPE:
            why = f"payload type {env.payload_type}, not {PAYLOAD_TYPE}"
            continue
        try:
            env.verify([key], 1)
        except VerificationError:
            ids = ", ".join(s.keyid[:16] for s in env.signatures.values()) or "none"
            why = (f"the signature does not verify with key {key.keyid[:16]} "
                   f"(signed by key {ids}: another key, or an altered statement)")
            continue
        stmt = json_object(env.payload)
        if stmt is None:
            why = "the signed statement is not a JSON object"
            continue
        v = _check_statement(stmt, name, sha256, source_commit)
        if v.ok or len(envelopes) == 1:
            return v
        why = v.reason
    return Verdict(ok=False, reason=why)


def _check_statement(stmt: Mapping[str, Any], name: str, sha256: str,
                     source_commit: str | None) -> Verdict:
    if stmt.get("_type") != STATEMENT_TYPE or stmt.get("predicateType") != PREDICATE_TYPE:
        return Verdict(ok=False, reason="not an in-toto v1 statement with SLSA provenance v1")
    summary = describe(stmt)
    subjects = {s.get("name"): s.get("digest", {}).get("sha256") for s in stmt.get("subject", [])}
    if name not in subjects:
        return Verdict(ok=False, summary=summary, reason=(
            f"the provenance is for {', '.join(map(str, subjects)) or 'nothing'}, not {name} "
            "(provenance of another package)"))
    if subjects[name] != sha256:
        return Verdict(ok=False, summary=summary, reason=(
            f"{name} has sha256 {sha256}, the signed provenance says {subjects[name]} "
            "(the file was altered)"))
    if source_commit:
        src = (stmt["predicate"]["buildDefinition"].get("resolvedDependencies") or [{}])[0]
        commit = src.get("digest", {}).get("gitCommit", "")
        if not commit.startswith(source_commit) or not source_commit:
            return Verdict(ok=False, summary=summary, reason=(
                f"built from commit {commit or '(none)'}, not {source_commit}"))
    return Verdict(ok=True, summary=summary)


def payload_of(bundle: bytes) -> dict[str, Any]:
    """The (unverified) statement of a bundle's first envelope: for `--rebuild`."""
    env = _envelopes(bundle)[0]
    data = json_object(env.payload)
    if data is None:
        raise ProvenanceError("the provenance's statement is not a JSON object (a damaged "
                              "bundle): publish the package's provenance again")
    return data


__all__ = ["SUFFIX", "BuildFacts", "ProvenanceError", "Verdict", "describe", "keygen",
           "load_public_key", "load_signer", "payload_of", "sign", "statement", "verify", "write"]
