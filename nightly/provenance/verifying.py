"""`nightly verify FILE|URL...`: each package against its `<file>.provenance.json`.

A target is a local file or an http(s) URL (a mirror served by any static web server, S3's
public endpoint); its provenance is looked for beside it. The checks, in order: a provenance
is there, its DSSE signature verifies with the given public key, its subject names this file
with this file's sha256, and (when asked) it was built from the given commit. A download is
hashed as it streams, bounded in size (MAX_PACKAGE, `--max-size`) and, with all the others
of one command, in time (TOTAL_S, `--timeout`: a server that trickles is cut there).
"""

from __future__ import annotations

import hashlib
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nightly import provenance
from nightly.errors import UsageError
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


MAX_PACKAGE = 8 << 30  # bytes read of one package: no package nightly builds is larger
MAX_PROVENANCE = 1 << 20  # a provenance file is a few kB
TOTAL_S = 600.0  # all the downloads of one `nightly verify`, however slowly a server sends


def _is_url(text: str) -> bool:
    return urllib.parse.urlsplit(text).scheme in ("http", "https")


def provenance_url(url: str) -> str:
    """The provenance beside the package at `url`: its path + SUFFIX, the query kept (a
    signed or versioned URL), the fragment dropped."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path + provenance.SUFFIX,
                                                  fragment=""))


@dataclass
class Budget:
    """What one `nightly verify` may read: bytes per file, and one deadline for all."""

    max_bytes: int = MAX_PACKAGE
    deadline: float = 0.0  # time.monotonic(); 0: TOTAL_S from the first download

    def left(self) -> float:
        if not self.deadline:
            self.deadline = time.monotonic() + TOTAL_S
        return self.deadline - time.monotonic()


def _get(url: str, budget: Budget, limit: int, consume: Callable[[bytes], None]) -> bool:
    """Stream `url` into `consume`, at most `limit` bytes, within the budget's deadline
    (each wait for the server bounded by what is left, and checked after every read).
    False on 404/403; other failures are the user's to see."""
    try:
        with urllib.request.urlopen(url, timeout=max(0.1, min(60.0, budget.left()))) as r:
            got = 0
            while chunk := r.read1(1 << 20):
                got += len(chunk)
                if got > limit:
                    raise UsageError(f"cannot fetch {safe_url(url)}: larger than {limit} bytes "
                                     "(not read further)")
                if budget.left() <= 0:
                    raise UsageError(f"cannot fetch {safe_url(url)}: not done within the "
                                     "time allowed (--timeout)")
                consume(chunk)
            return True
    except urllib.error.HTTPError as e:
        if e.code in (403, 404):  # S3 answers 403 for a missing key without ListBucket
            return False
        raise UsageError(f"cannot fetch {safe_url(url)}: HTTP {e.code}") from e
    except (urllib.error.URLError, OSError) as e:  # a socket timeout included
        raise UsageError(f"cannot fetch {safe_url(url)}: {e}") from e


def fetch(target: str, budget: Budget | None = None) -> Target:
    """Read a package (hashed as it streams, never held whole) and its provenance from a
    path or an http(s) URL."""
    budget = budget or Budget()
    if _is_url(target):
        h = hashlib.sha256()
        if not _get(target, budget, budget.max_bytes, h.update):
            raise UsageError(f"{safe_url(target)}: not found (HTTP 404)")
        name = urllib.parse.unquote(urllib.parse.urlsplit(target).path.rsplit("/", 1)[-1])
        parts: list[bytes] = []
        found = _get(provenance_url(target), budget, MAX_PROVENANCE, parts.append)
        return Target(where=safe_url(target), name=name, sha256=h.hexdigest(),
                      bundle=b"".join(parts) if found else None)
    path = Path(target)
    if not path.is_file():
        raise UsageError(f"{target}: no such file (give a package file or an http(s) URL)")
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    prov = path.with_name(path.name + provenance.SUFFIX)
    bundle = None
    if prov.is_file():
        with prov.open("rb") as f:
            bundle = f.read(MAX_PROVENANCE + 1)
        if len(bundle) > MAX_PROVENANCE:
            raise UsageError(f"{prov}: larger than {MAX_PROVENANCE} bytes: not a provenance")
    return Target(where=str(path), name=path.name, sha256=h.hexdigest(), bundle=bundle)


def verify_targets(targets: Sequence[str], key: Any, *, source_commit: str | None = None,
                   budget: Budget | None = None) -> list[Checked]:
    if source_commit is not None and not source_commit.strip():
        raise UsageError("--source-commit is empty: give the commit (or a prefix of it) the "
                         "packages must be built from, or leave the option out")
    budget = budget or Budget()
    out = []
    for t in targets:
        got = fetch(t, budget)
        out.append(Checked(target=got.where, fetched=got, verdict=provenance.verify(
            got.name, got.sha256, got.bundle, key, source_commit=source_commit)))
    return out


__all__ = ["Budget", "Checked", "Target", "fetch", "provenance_url", "verify_targets"]
