"""`nightly verify FILE|URL...`: each package against its `<file>.provenance.json`.

A target is a local file or an http(s) URL (a mirror served by any static web server, S3's
public endpoint); its provenance is looked for beside it. The checks, in order: a provenance
is there, its DSSE signature verifies with the given public key, its subject names this file
with this file's sha256, and (when asked) it was built from the given commit.
"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nightly.errors import UsageError
from nightly.publish import provenance
from nightly.redact import safe_url


@dataclass(frozen=True, kw_only=True)
class Target:
    """A package fetched for checking: its name, sha256 and its provenance bundle."""

    where: str
    name: str
    sha256: str
    bundle: bytes | None  # None: no provenance beside it


@dataclass(frozen=True, kw_only=True)
class Checked:
    target: str
    verdict: provenance.Verdict
    fetched: Target | None = None


def _is_url(text: str) -> bool:
    return urllib.parse.urlsplit(text).scheme in ("http", "https")


def _get(url: str) -> bytes | None:
    """The body of `url`, None on 404; other failures are the user's to see."""
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            data: bytes = r.read()
            return data
    except urllib.error.HTTPError as e:
        if e.code in (403, 404):  # S3 answers 403 for a missing key without ListBucket
            return None
        raise UsageError(f"cannot fetch {safe_url(url)}: HTTP {e.code}") from e
    except (urllib.error.URLError, OSError) as e:
        raise UsageError(f"cannot fetch {safe_url(url)}: {e}") from e


def fetch(target: str) -> Target:
    """Read a package and its provenance from a path or an http(s) URL."""
    if _is_url(target):
        data = _get(target)
        if data is None:
            raise UsageError(f"{safe_url(target)}: not found (HTTP 404)")
        name = urllib.parse.unquote(urllib.parse.urlsplit(target).path.rsplit("/", 1)[-1])
        return Target(where=safe_url(target), name=name, sha256=hashlib.sha256(data).hexdigest(),
                      bundle=_get(target + provenance.SUFFIX))
    path = Path(target)
    if not path.is_file():
        raise UsageError(f"{target}: no such file (give a package file or an http(s) URL)")
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    prov = path.with_name(path.name + provenance.SUFFIX)
    return Target(where=str(path), name=path.name, sha256=h.hexdigest(),
                  bundle=prov.read_bytes() if prov.is_file() else None)


def verify_targets(targets: Sequence[str], key: object, *,
                   source_commit: str | None = None) -> list[Checked]:
    out = []
    for t in targets:
        got = fetch(t)
        out.append(Checked(target=got.where, fetched=got, verdict=provenance.verify(
            got.name, got.sha256, got.bundle, key, source_commit=source_commit)))
    return out


__all__ = ["Checked", "Target", "fetch", "verify_targets"]
