"""What the signing step hands to publishing: the provenance nightly signed, per package.

The night signs once (nightly.provenance.attest.sign_packages, called by the night with the
packages it signs) and passes the `Signatures` it returns to the upload, which publishes
each package's provenance from there: publishing never signs, and never calls into the
signing step. A command that publishes a day on its own (`nightly upload`) reads the same
`Signatures` from the day folder first (`on_disk`): only provenance nightly signed, that
verifies with the site's key for the file's recorded sha256, is ever published.

Also here, for signing and publishing alike: which packages are signed and published at all
(`signable`), the site's public key (`public_key_of`) and the check `nightly promote` makes
of a whole day (`unverified`).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nightly import provenance
from nightly.builds.area.ownership import PUBLISHED_KINDS, owned_by_name, owned_names
from nightly.config import Config
from nightly.errors import NightlyError
from nightly.files import sha256_file
from nightly.workspace import SUCCEEDED, Day, PackageFile, State

PROVENANCE_MAX = 1 << 20  # a provenance file is a few kB; never read more than this


@dataclass(frozen=True, kw_only=True)
class ToSign:
    """A package the night signs: its build and the sha256 it carries from take-back."""

    build_id: str
    package: PackageFile


@dataclass(frozen=True, kw_only=True)
class Signatures:
    """The provenance of each signed package, by (file name, sha256), and the site's public
    key (None: nothing is trusted, so no provenance is published)."""

    public_key: Any = None
    bundles: Mapping[tuple[str, str], bytes] = field(default_factory=dict)
    refused: frozenset[str] = frozenset()  # names whose provenance here does not verify

    def of(self, name: str, sha256: str) -> bytes | None:
        """The provenance nightly signed for this file with these bytes, else None."""
        return self.bundles.get((name, sha256))

    def copy_to_channel(self, channel: Path, keyed: Sequence[tuple[str, str, str]]) -> None:
        """Each conda package's provenance (channel key, file name, sha256) into the channel
        folder beside it (`<subdir>/<file>`): only one that nightly signed."""
        for key, name, sha256 in keyed:
            data = self.of(name, sha256)
            if data is not None:
                dest = channel / (key + provenance.SUFFIX)
                tmp = dest.with_name(dest.name + ".tmp")
                tmp.write_bytes(data)
                os.replace(tmp, dest)


def signable(name: str, config: Config) -> bool:
    """Only a published kind of package named for the project is ever signed or published."""
    proj = config.project
    return name.endswith(PUBLISHED_KINDS) and owned_by_name(
        name, owned_names(proj.name, proj.extra_names))


def to_sign(config: Config, state: State) -> list[ToSign]:
    """The day's packages the signing step signs: each signable package of a succeeded build
    (only those passed their smoke test), in build order."""
    return [ToSign(build_id=bid, package=p) for bid, entry in sorted(state.builds.items())
            if entry.status == SUCCEEDED for p in entry.packages if signable(p.name, config)]


def read_provenance(path: Path) -> bytes | None:
    """The provenance file beside `path` (a regular file, not followed if a link, at most
    PROVENANCE_MAX bytes); None when there is none or it is not one."""
    prov = path.with_name(path.name + provenance.SUFFIX)
    try:
        fd = os.open(prov, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        data = f.read(PROVENANCE_MAX + 1)
    return data if len(data) <= PROVENANCE_MAX else None


def trusted(path: Path, sha256: str, public_key: Any) -> bytes | None:
    """The provenance beside `path` when it is nightly's own: its signature verifies with
    the site's key and it names this file with this sha256. A provenance file nightly did not
    sign (placed in packages/, or altered since) is never trusted: None."""
    bundle = read_provenance(path)
    if bundle is None or public_key is None:
        return None
    return bundle if verifies(path.name, sha256, bundle, public_key) else None


def verifies(name: str, sha256: str, bundle: bytes, public_key: Any) -> bool:
    """Whether `bundle` is nightly's signature (the site's key) over this name and sha256."""
    try:
        return provenance.verify(name, sha256, bundle, public_key).ok
    except (ValueError, KeyError, TypeError, json.JSONDecodeError):
        return False


def public_key_of(config: Config) -> Any:
    """The site's public key (from the configured signing key, else the provenance.pub
    beside it), None without provenance or when neither can be read here: then no
    provenance is trusted, so none is published."""
    key = config.provenance.key
    if key is None:
        return None
    try:
        return provenance.load_signer(key).public_key
    except NightlyError:
        try:
            return provenance.load_public_key(key.with_name(provenance.PUBLIC_NAME))
        except NightlyError:
            return None


def on_disk(config: Config, day: Day, state: State) -> Signatures:
    """The Signatures the day folder holds for its succeeded packages (for a command that
    publishes without signing first): each provenance file read once and kept only when it
    verifies for the package's recorded sha256."""
    key = public_key_of(config)
    bundles: dict[tuple[str, str], bytes] = {}
    refused: set[str] = set()
    for item in to_sign(config, state):
        p = item.package
        path = day.path / p.path
        data = trusted(path, p.sha256, key)
        if data is not None:
            bundles[(p.name, p.sha256)] = data
        elif read_provenance(path) is not None:
            refused.add(p.name)
    return Signatures(public_key=key, bundles=bundles, refused=frozenset(refused))


def unverified(config: Config, day: Day, state: State) -> list[str]:
    """Each succeeded package of the day whose provenance does not verify with the site's
    key, with why (for `nightly promote`); [] when provenance is not configured."""
    if config.provenance.key is None:
        return []
    key = provenance.load_signer(config.provenance.key).public_key
    problems = []
    for item in to_sign(config, state):
        pkg = item.package
        path = day.path / pkg.path
        prov = path.with_name(path.name + provenance.SUFFIX)
        try:
            sha = sha256_file(path)
            bundle = prov.read_bytes() if prov.is_file() else None
        except OSError as e:
            problems.append(f"{pkg.name}: {e}")
            continue
        v = provenance.verify(pkg.name, sha, bundle, key)
        if v.ok and sha != pkg.sha256:
            v = provenance.Verdict(ok=False, reason=f"sha256 {sha}, built as {pkg.sha256}")
        if not v.ok:
            problems.append(f"{pkg.name}: {v.reason}")
    return problems


__all__ = ["PROVENANCE_MAX", "Signatures", "ToSign", "on_disk", "public_key_of",
           "read_provenance", "signable", "to_sign", "trusted", "unverified", "verifies"]
