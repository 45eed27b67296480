"""The night's signing step: sign every succeeded build's packages (nightly.provenance).

The night calls it once, after the build phase, with the packages it signs
(nightly.provenance.signed.to_sign), on the machine that runs the night: with the local
phase that is the build machine, in cluster mode the orchestrator, after each staged package
was checked against what its worker reported (nightly.cluster.verify). Only packages that
passed their smoke test are in `succeeded` builds, so only those get a provenance. Each is
signed for the sha256 it carries from take-back (nightly.builds.run.takeback): the bytes are
not read again here, so a signature only ever names the bytes tested, and the upload's own
read refuses any other (nightly.publish.sending). A package whose provenance is there and
names its sha256 is left alone (a rerun signs nothing again); a rebuilt one gets a new one.
What it returns, the `Signatures`, is what publishing publishes beside each package.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from nightly import __version__, provenance
from nightly.builds.repro.reproducible import source_epoch
from nightly.config import Config
from nightly.config.timeouts import ExternalTimeouts, default_timeouts
from nightly.core.matrix import Build
from nightly.errors import NightlyError
from nightly.files import sha256_file
from nightly.provenance.signed import Signatures, ToSign, on_disk, trusted
from nightly.workspace import BuildEntry, Day, State


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
        self.written = 0

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

    def sign_one(self, item: ToSign, entry: BuildEntry) -> bytes | None:
        """The provenance of one package: nightly's own one already beside it over this
        sha256, else a new one signed for the sha256 it carries and written beside it
        (atomically); None when the package is not there."""
        pkg = item.package
        path = self.day.path / pkg.path
        if not path.is_file():
            return None
        # Left alone only when it is our own signature over this sha256: anything else
        # there (unsigned, another key's, altered) is replaced by nightly's own.
        kept = trusted(path, pkg.sha256, self.signer.public_key)
        if kept is not None:
            return kept
        data = provenance.sign(provenance.statement(
            self.facts(item.build_id, entry, pkg.name, pkg.sha256)), self.signer)
        dest = path.with_name(path.name + provenance.SUFFIX)
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.write_bytes(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
        self.written += 1
        return data


def sign_packages(config: Config, day: Day, state: State, packages: Sequence[ToSign], *,
                  commit: str, source_dir: Path, channel: str, builds: Sequence[Build],
                  log: Callable[[str], None]) -> Signatures:
    """The signing step: each of `packages` signed (or its signature kept), never fatal to
    the night (a package without provenance is then refused by `nightly promote` and
    reported by `nightly verify`). Returns what publishing publishes beside them."""
    if config.provenance.key is None:
        return Signatures()
    try:
        att = Attester(config, day, commit=commit, source_dir=source_dir, channel=channel,
                       builds=builds)
    except NightlyError as e:
        log(f"provenance: not signed: {e}")
        return on_disk(config, day, state)  # what an earlier run signed is still published
    bundles: dict[tuple[str, str], bytes] = {}
    for item in packages:
        try:
            data = att.sign_one(item, state.get(item.build_id))
        except (OSError, ValueError) as e:
            log(f"provenance: {item.build_id}: {item.package.name}: not signed: {e}")
            continue
        if data is not None:
            bundles[(item.package.name, item.package.sha256)] = data
    log(f"provenance: {att.written} package(s) signed")
    return Signatures(public_key=att.signer.public_key, bundles=bundles)


__all__ = ["Attester", "image_digest", "sign_packages"]
