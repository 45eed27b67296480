"""The night's provenance step: sign every succeeded build's packages (nightly.provenance).

Runs after the build phase, on the machine that runs the night: with the local phase that is
the build machine, in cluster mode the orchestrator, after each staged package was checked
against what its worker reported (nightly.cluster.verify). Only packages that passed their
smoke test are in `succeeded` builds, so only those get a provenance. A package whose
provenance is there and names its current sha256 is left alone (a rerun signs nothing again);
a rebuilt one gets a new one.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nightly import __version__, provenance
from nightly.builds.area.ownership import PUBLISHED_KINDS, owned_by_name, owned_names
from nightly.builds.repro.reproducible import source_epoch
from nightly.config import Config
from nightly.config.timeouts import ExternalTimeouts, default_timeouts
from nightly.core.matrix import Build
from nightly.errors import NightlyError
from nightly.files import BytesChanged, check_sha256, sha256_file
from nightly.workspace import FAILED, SUCCEEDED, BuildEntry, Day, State

if TYPE_CHECKING:
    from nightly.builds.run.phase import NightContext
    from nightly.stores import Store


def image_digest(image: str, *, timeouts: ExternalTimeouts | None = None) -> str:
    """The image's id on this machine's container engine, "" when it cannot be asked (an
    orchestrator without the builders' engine): the reference alone is then recorded."""
    try:
        import docker

        client = docker.from_env(timeout=int((timeouts or default_timeouts()).engine_api))
        try:
            return str(client.images.get(image).id)
        finally:
            client.close()
    except Exception:  # any engine trouble: the digest is optional
        return ""


def _wheelhouse(day: Day) -> tuple[tuple[str, str], ...]:
    folder = day.path / "wheelhouse"
    if not folder.is_dir():
        return ()
    return tuple((p.name, sha256_file(p)) for p in sorted(folder.glob("*.whl")))


PROVENANCE_MAX = 1 << 20  # a provenance file is a few kB; never read more than this


def read_provenance(path: Path) -> bytes | None:
    """The provenance file beside `path` (a regular file, not followed if a link, at most
    PROVENANCE_MAX bytes); None when there is none or it is not one."""
    prov = path.with_name(path.name + provenance.SUFFIX)
    try:
        fd = os.open(prov, os.O_RDONLY | os.O_NOFOLLOW)
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
    try:
        ok = provenance.verify(path.name, sha256, bundle, public_key).ok
    except (ValueError, KeyError, TypeError, json.JSONDecodeError):
        return None
    return bundle if ok else None


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


def signable(name: str, config: Config) -> bool:
    """Only a published kind of package named for the project is ever signed or published."""
    proj = config.project
    return name.endswith(PUBLISHED_KINDS) and owned_by_name(
        name, owned_names(proj.name, proj.extra_names))


class Attester:
    """Signs packages of one day with the configured key."""

    def __init__(self, config: Config, day: Day, *, commit: str, source_dir: Path,
                 channel: str, builds: Sequence[Build]) -> None:
        assert config.provenance.key is not None
        self.config, self.day, self.commit, self.channel = config, day, commit, channel
        self.signer = provenance.load_signer(config.provenance.key)
        self.epoch = (str(source_epoch(source_dir, timeouts=config.external_timeouts).epoch)
                      if source_dir.exists() else "")
        self.builds = {b.id: b for b in [*config.builds, *builds]}
        self.deps = _wheelhouse(day)
        self._digests: dict[str, str] = {}

    def facts(self, bid: str, entry: BuildEntry, name: str, sha256: str) -> provenance.BuildFacts:
        cfg = self.config
        recipe = cfg.recipes / entry.package / "build.sh"
        build = self.builds.get(bid)
        image = cfg.image_for(build) if build is not None and entry.executor == "container" else ""
        if image and image not in self._digests:
            self._digests[image] = image_digest(image, timeouts=self.config.external_timeouts)
        return provenance.BuildFacts(
            name=name, sha256=sha256, source_url=cfg.project.source, commit=self.commit,
            branch=cfg.project.ref or cfg.project.branch, build_id=bid, package=entry.package,
            python=entry.python, cuda=entry.cuda, variant=entry.variant,
            recipe=f"{recipe.parent.parent.name}/{entry.package}/build.sh",
            recipe_sha256=sha256_file(recipe) if recipe.is_file() else "",
            image=image, image_digest=self._digests.get(image, ""), executor=entry.executor,
            machine=entry.worker_name or entry.machine, source_date_epoch=self.epoch,
            started=entry.started, finished=entry.ended, nightly_version=__version__,
            dependencies=self.deps, invocation=f"{self.day.name}/{self.channel}",
        )

    def sign_entry(self, bid: str, entry: BuildEntry) -> list[Path]:
        written = []
        for pkg in entry.packages:
            path = self.day.path / pkg.path
            if not signable(pkg.name, self.config) or not path.is_file():
                continue
            # Left alone only when it is our own signature over this sha256: anything else
            # there (unsigned, another key's, altered) is replaced by nightly's own.
            if trusted(path, pkg.sha256, self.signer.public_key) is not None:
                continue
            check_sha256(path, pkg.sha256, before="signed")  # BytesChanged: never signed
            written.append(provenance.write(path, self.facts(bid, entry, pkg.name, pkg.sha256),
                                            self.signer))
        return written


def sign_day(config: Config, day: Day, state: State, *, commit: str, source_dir: Path,
             channel: str, builds: Sequence[Build], log: Callable[[str], None]) -> int:
    """Sign what needs it; never fatal to the night (a package without provenance is then
    refused by `nightly promote` and reported by `nightly verify`). Returns how many."""
    if config.provenance.key is None:
        return 0
    try:
        att = Attester(config, day, commit=commit, source_dir=source_dir, channel=channel,
                       builds=builds)
    except NightlyError as e:
        log(f"provenance: not signed: {e}")
        return 0
    count = 0
    for bid, entry in sorted(state.builds.items()):
        if entry.status != SUCCEEDED:
            continue
        try:
            count += len(att.sign_entry(bid, entry))
        except BytesChanged as e:  # not the bytes tested: the build fails, nothing published
            log(f"provenance: {bid}: not signed: {e}")
            state.update(bid, status=FAILED, reason=str(e))
        except (OSError, ValueError) as e:
            log(f"provenance: {bid}: not signed: {e}")
    log(f"provenance: {count} package(s) signed")
    return count


def publish_beside(store: Store, key: str, package: Path, sha256: str, public_key: Any,
                   log: Callable[[str], None]) -> str | None:
    """Put `<key>.provenance.json` into the store when the package has one here that nightly
    signed (`trusted`) and the store's copy differs: before the package itself, so nobody
    sees it without it. Returns its sha256 (for the index pages), None when the package has
    none that verifies (a provenance file nightly did not sign is never published)."""
    data = trusted(package, sha256, public_key)
    pkey = key + provenance.SUFFIX
    if data is None:
        if read_provenance(package) is not None:
            log(f"provenance: {package.name}: not published: it does not verify with the "
                "site's key (nightly publishes only what it signed)")
        return _published_sha(store, pkey, package.name, sha256, public_key)
    sha = hashlib.sha256(data).hexdigest()
    info = store.head(pkey)
    if info is None or info.sha256 != sha:
        store.put_bytes(pkey, data, "application/json")
        log(f"provenance: {store.url}/{pkey}")
    return sha


def _published_sha(store: Store, pkey: str, name: str, sha256: str, public_key: Any) -> str | None:
    """The sha256 of the provenance already in the store when it is nightly's own for this
    file (the pages keep listing it), else None."""
    if public_key is None:
        return None
    try:
        got = store.get_bytes(pkey, max_bytes=PROVENANCE_MAX)
    except NightlyError:  # unreadable or too large: not listed
        return None
    if got is None or not provenance.verify(name, sha256, got[0], public_key).ok:
        return None
    return hashlib.sha256(got[0]).hexdigest()


def copy_to_channel(channel: Path, keyed: Sequence[tuple[str, Path, str]],
                    public_key: Any) -> None:
    """Each conda package's provenance (key, package, sha256) into the channel folder beside
    it (`<subdir>/<file>`): only one that nightly signed (`trusted`)."""
    for key, package, sha256 in keyed:
        data = trusted(package, sha256, public_key)
        if data is not None:
            dest = channel / (key + provenance.SUFFIX)
            tmp = dest.with_name(dest.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, dest)


def unverified(config: Config, day: Day, state: State) -> list[str]:
    """Each succeeded package of the day whose provenance does not verify with the site's
    key, with why (for `nightly promote`); [] when provenance is not configured."""
    if config.provenance.key is None:
        return []
    key = provenance.load_signer(config.provenance.key).public_key
    problems = []
    for _bid, entry in sorted(state.builds.items()):
        if entry.status != SUCCEEDED:
            continue
        for pkg in entry.packages:
            if not signable(pkg.name, config):
                continue  # never published (a kept source archive)
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


def provenance_step(night: NightContext) -> None:
    """The night's step (a NightContext)."""
    sign_day(night.config, night.day, night.state, commit=night.commit,
             source_dir=night.source_dir, channel=night.channel, builds=night.builds,
             log=night.log)


__all__ = ["Attester", "copy_to_channel", "image_digest", "provenance_step", "public_key_of",
           "publish_beside", "read_provenance", "sign_day", "signable", "trusted", "unverified"]
