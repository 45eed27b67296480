"""Verified staging: what the orchestrator accepts from the staging store, and on what grounds.

Every host of the build network can write to staging (a shared folder, an S3 prefix): what is
there is not trusted as found. The record of a build is the result its worker returned over
the authenticated Dask channel (mutual TLS, nightly.cluster.tls): each package's name, key, size and
sha256. The orchestrator downloads each package and compares it with that record before the
package counts as built; a mismatch fails the build, and a failed build publishes nothing.

A result read back from staging instead of returned (a rerun adopting an attempt that had
finished while the orchestrator was dead) carries a seal: an HMAC-SHA256 of the result under
the night's key, which the orchestrator keeps in its day folder (0600) and sends to workers
only inside the task (over TLS). A result.json changed in staging, or written by anything
but a worker of this night, has no valid seal and is not adopted: the build runs again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path

from nightly.cluster.messages import StagedPackage
from nightly.files import confined

SEAL = "seal"
KEY_BYTES = 32
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def night_key(path: Path) -> bytes:
    """The night's sealing key: made once (0600, O_EXCL), then read by reruns of the day."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_bytes()
        if len(key) == KEY_BYTES:
            return key
        path.unlink()  # truncated by a crash between create and write: make a new one
        return night_key(path)
    key = secrets.token_bytes(KEY_BYTES)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, key)
    finally:
        os.close(fd)
    return key


def _canonical(result: Mapping[str, object]) -> bytes:
    body = {k: v for k, v in result.items() if k != SEAL}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()


def seal(key: bytes, result: Mapping[str, object]) -> str:
    return hmac.new(key, _canonical(result), hashlib.sha256).hexdigest()


def sealed(key: bytes, result: Mapping[str, object]) -> bool:
    got = result.get(SEAL)
    return isinstance(got, str) and bool(key) and hmac.compare_digest(got, seal(key, result))


def new_token_part() -> str:
    """The unpredictable part of an attempt's name (128 bits): no host can name, and so
    write ahead into, another build's attempt before that attempt exists."""
    return secrets.token_hex(16)


def check_packages(packages: object, prefix: str) -> list[StagedPackage]:
    """The packages a result records, each with a plain file name, a key under its own
    attempt's prefix (`prefix` + "packages/"), a size and a sha256. ValueError otherwise."""
    out = []
    if not isinstance(packages, (list, tuple)):
        raise ValueError("the result's packages are not a list")
    for p in packages:
        if not isinstance(p, Mapping):
            raise ValueError(f"a package record is not a table: {p!r}")
        name, key, sha = str(p.get("name", "")), str(p.get("key", "")), str(p.get("sha256", ""))
        if "/" in name or confined(name) is None:
            raise ValueError(f"bad package name {name!r}")
        if key != f"{prefix}packages/{name}":
            raise ValueError(f"{name}: its staging key {key!r} is not under its attempt "
                             f"({prefix}packages/)")
        if not _HEX64.match(sha):
            raise ValueError(f"{name}: {sha!r} is not a sha256")
        size = p.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"{name}: size {size!r} is not a byte count")
        out.append(StagedPackage(name=name, key=key, size=size, sha256=sha))
    return out


__all__ = [
    "SEAL",
    "check_packages",
    "new_token_part",
    "night_key",
    "seal",
    "sealed",
]
