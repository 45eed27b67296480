"""Publish a day's good packages and regenerate the index pages of the folders they are in.

Only builds whose state is `succeeded` (which includes a passed smoke test) are published.
Every package is published with `Store.ensure` (skipped when the object is there with the
same sha256) and recorded in state.json under the build's `published` map, so rerunning
`nightly upload` finishes what a failed or killed upload left and duplicates nothing. A failed
upload is recorded as the build's `upload_error` and the package stays where it is.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from nightly import provenance
from nightly.channels import anaconda, conda
from nightly.config import Config
from nightly.errors import ConfigError, PublishError
from nightly.index import IndexOptions, metadata
from nightly.index.manifest import FileRecord
from nightly.provenance import signed
from nightly.publish import gate, sending
from nightly.stores import Store
from nightly.stores.layout import STORE_KINDS, conda_channel_dir, kind_of, remote_folder
from nightly.workspace import SUCCEEDED, BuildEntry, Day, State

Log = Callable[[str], None]


@dataclass
class UploadReport:
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # destination -> error
    folders: dict[str, dict[str, str]] = field(default_factory=dict)  # folder -> name -> sha
    # folder -> name -> what the index shows of a file uploaded now (its core metadata…)
    records: dict[str, dict[str, FileRecord]] = field(default_factory=dict)
    # folder -> names deleted because their build's rebuild replaced them
    removed: dict[str, list[str]] = field(default_factory=dict)
    index_errors: list[str] = field(default_factory=list)
    held_back: dict[str, str] = field(default_factory=dict)  # build -> why it was not published

    @property
    def ok(self) -> bool:
        return not self.failed and not self.index_errors


def open_destination(config: Config) -> Any:
    """The Store of publish.url (imports boto3 only for s3://)."""
    from nightly.stores import open_store

    p = config.publish
    try:
        return open_store(
            p.url,
            endpoint_url=p.endpoint_url or None,
            region=p.region or None,
            profile=p.profile or None,
            acl=p.acl or None,
            connections=p.index_workers,
            backoffs=config.backoff,
            timeouts=config.external_timeouts,
        )
    except ConfigError as e:
        if e.file:
            raise
        # The store knows what is wrong; the config knows where it was written.
        msg = str(e).split(": ", 1)[-1]
        raise ConfigError(msg, file=str(config.path), key="publish.url") from e


def publish_day(
    config: Config, day: Day, state: State, *, channel: str, log: Log, index: bool = True,
    force_partial: bool = False,
    replace: Sequence[str] = (),
    on_package: Callable[[str, str, str], None] | None = None,
    signatures: signed.Signatures | None = None,
) -> UploadReport:
    """Upload what is not yet published; then refresh the index pages of the day's folders.
    `[publish] atomic` holds back the good builds a failed one gates (nightly.publish.gate),
    unless `force_partial`.

    A package already in the store with another sha256 is replaced only when this build
    published it before (state.json says so: a rebuild of it) or the build matches a
    `replace` glob (`--rebuild`): a lost or reset state never silently replaces what users
    already installed.

    `on_package(build, package, what)`: "queued" for each package to upload (all of them
    first), "uploading" as its turn comes, then "uploaded", "already there" or "failed"
    (the night's view of it: nightly.night.publishing).

    `signatures`: what the night's signing step signed (nightly.provenance.attest), each
    published beside its package; without it (a day published on its own), the provenance
    in the day folder that verifies with the site's key (nightly.provenance.signed.on_disk)."""
    pub = config.publish
    report = UploadReport()
    store = open_destination(config) if pub.url else None
    conda_files: list[tuple[str, dict[str, object]]] = []
    report.held_back = gate.held_back(pub.atomic, state, channel)
    gate.record(state, report.held_back, forced=force_partial)
    for bid, why in sorted(report.held_back.items()):
        log(f"{'published anyway (--force-partial)' if force_partial else 'held back'}: "
            f"{bid}: {why}")
    if force_partial:
        report.held_back = {}
    keys = {bid: dict(_store_keys(entry, channel)) for bid, entry in sorted(state.builds.items())}
    if signatures is None:
        signatures = (signed.on_disk(config, day, state) if store is not None or pub.conda_channel
                      else signed.Signatures())
    said = on_package or (lambda _bid, _name, _what: None)
    for bid, entry in sorted(state.builds.items()):
        if store is not None and entry.status == SUCCEEDED and bid not in report.held_back:
            for p in entry.packages:
                if keys[bid].get(p.name) is not None:
                    said(bid, p.name, "queued")
    for bid, entry in sorted(state.builds.items()):
        if entry.status != SUCCEEDED or bid in report.held_back:
            continue
        for pkg in (p.to_json() for p in entry.packages):
            key = keys[bid].get(pkg["name"])
            if kind_of(_package_type(entry, pkg), pkg["name"]) is not None and \
                    not signed.signable(pkg["name"], config):
                # Filed before ownership was checked, or by hand: never published.
                report.failed[pkg["name"]] = "not the project's package: not published"
                if key is not None and store is not None:
                    said(bid, pkg["name"], "failed")
                log(f"not published: {pkg['name']}: not named for the project "
                    "([project] name, extra_names)")
                continue
            if key is None and kind_of(_package_type(entry, pkg), pkg["name"]) == "conda":
                conda_files.append((bid, pkg))
            if key is None or store is None:
                continue
            _upload_one(store, day, state, report, bid, pkg, key, signatures=signatures,
                        may_replace=_matches(bid, replace), log=log, said=said)
    if store is not None:
        current = {f"{store.url}/{k}" for ks in keys.values() for k in ks.values()}
        for bid, entry in sorted(state.builds.items()):
            folders = {k.rpartition("/")[0] for k in keys[bid].values()}
            if entry.status == SUCCEEDED and folders and bid not in report.held_back:
                _retire_replaced(store, state, bid, folders, current, report, log)
    if conda_files:
        _publish_conda(config, day, state, conda_files, channel=channel, report=report, log=log,
                       signatures=signatures)
    if index and store is not None and pub.index and (report.folders or report.removed):
        regenerate_index(config, store, report, channel=channel, log=log)
    return report


def _upload_one(store: Any, day: Day, state: State, report: UploadReport, bid: str,
                pkg: dict[str, Any], key: str, *, signatures: signed.Signatures, may_replace: bool,
                log: Log,
                said: Callable[[str, str, str], None]) -> None:
    """One package of a build to the store (with its provenance beside it), recorded in the
    report and state.json; a failure recorded, never raised."""
    folder = key.rpartition("/")[0]
    dest = f"{store.url}/{key}"
    report.folders.setdefault(folder, {})  # its name listed once it is there
    said(bid, pkg["name"], "uploading")
    try:  # the bytes tested and signed, or nothing: the upload's own read is the check
        prov_sha = sending.provenance_beside(store, key, pkg["name"], pkg["sha256"],
                                             signatures, log)
        uploaded = _ensure(store, key, day.path / pkg["path"], pkg["sha256"],
                           may_replace=may_replace or dest in state.get(bid).published,
                           state=state, build_id=bid)
    except (PublishError, OSError) as e:
        report.failed[dest] = str(e)
        state.update(bid, upload_error=f"{dest}: {e}")
        log(f"upload failed: {dest}: {e} (the package stays; rerun `nightly upload`)")
        said(bid, pkg["name"], "failed")
        return
    record = _publish_metadata(store, key, day.path / pkg["path"], pkg["sha256"], uploaded, log)
    record = dataclasses.replace(record, provenance_sha256=prov_sha)
    report.folders[folder][pkg["name"]] = pkg["sha256"]
    report.records.setdefault(folder, {})[pkg["name"]] = record
    state.add_published(bid, dest, pkg["sha256"])
    (report.uploaded if uploaded else report.skipped).append(dest)
    log(f"{'uploaded' if uploaded else 'already there'}: {dest}")
    said(bid, pkg["name"], "uploaded" if uploaded else "already there")


def _matches(build_id: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(build_id, g) for g in globs)


def _ensure(store: Store, key: str, path: Path, sha256: str, *, may_replace: bool,
            state: State, build_id: str) -> bool:
    """Store.ensure, refusing to replace another sha256 unless `may_replace` (saying whose it
    is), and sending the bytes it hashed (nightly.publish.sending)."""
    info = store.head(key)
    if info is not None and info.sha256 == sha256:
        return False
    if info is not None and info.sha256 is None and info.size == path.stat().st_size:
        # No recorded sha256: an upload killed between the object and its metadata, or an
        # object some other tool wrote. Its content decides (one download, rare).
        may_replace = may_replace or sending.stored_sha256(store, key, path.parent) == sha256
    if info is not None and not may_replace:
        raise sending.refusal(store, state, key, path, sha256, info.sha256, build_id)
    sending.put_checked(store, key, path, sha256)
    return True


def _package_type(entry: BuildEntry, pkg: dict[str, Any]) -> str:
    return entry.package or str(pkg["path"].split("/")[1])


def _store_keys(entry: BuildEntry, channel: str) -> Iterator[tuple[str, str]]:
    """(file name, store key) of a build's packages that go to the store (wheels, libtorch)."""
    cuda = entry.cuda
    for pkg in (p.to_json() for p in entry.packages):
        cuda = cuda or pkg["path"].split("/")[2]
        kind = kind_of(_package_type(entry, pkg), pkg["name"])
        if kind in STORE_KINDS:
            yield pkg["name"], f"{remote_folder(kind, channel, cuda)}/{pkg['name']}"


def _publish_metadata(
    store: Store, key: str, path: Path, sha256: str, uploaded: bool, log: Log
) -> FileRecord:
    """Store a wheel's core metadata beside it (PEP 658) before any page can point to it."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if uploaded else None
    if not key.endswith(".whl"):
        return FileRecord(sha256=sha256, upload_time=when)
    try:
        md = metadata.from_wheel(path)
        mkey = key + metadata.METADATA_SUFFIX
        info = None if uploaded else store.head(mkey)
        if info is None or info.sha256 != md.sha256:
            store.put_bytes(mkey, md.data, metadata.METADATA_TYPE)
    except (PublishError, OSError) as e:
        log(f"no core metadata for {store.url}/{key}: {e} (pages will not offer it)")
        return FileRecord(sha256=sha256, upload_time=when)
    return FileRecord(sha256, md.sha256, md.requires_python, when)


def _retire_replaced(
    store: Store,
    state: State,
    bid: str,
    folders: set[str],
    current: set[str],
    report: UploadReport,
    log: Log,
) -> None:
    """Delete what a build published before and no longer produces (a rebuild whose wheel has
    another platform tag), so that one version never has two wheels of one build. Only files
    in the folders the build publishes to now are candidates: what a promotion recorded in
    another channel, or a conda channel, is never touched."""
    published = dict(state.get(bid).published)
    prefix = store.url + "/"
    for dest in sorted(published):
        if not dest.startswith(prefix) or dest in current:
            continue
        key = dest[len(prefix) :]
        folder, _, name = key.rpartition("/")
        if folder not in folders or not name.endswith((".whl", ".zip")):
            continue
        try:
            store.delete(key)
            store.delete(key + metadata.METADATA_SUFFIX)
            store.delete(key + provenance.SUFFIX)
        except PublishError as e:
            log(f"could not delete the replaced {dest}: {e} (rerun `nightly upload`)")
            continue
        del published[dest]
        state.update(bid, published=published)
        report.removed.setdefault(folder, []).append(name)
        log(f"deleted, replaced by its rebuild: {dest}")


def index_options(config: Config) -> IndexOptions:
    return IndexOptions(
        find_links_name=config.publish.find_links_name,
        shared=config.publish.index_shared,
        aggregate=config.publish.index_aggregate,
        versions=config.retention.index_versions,
        workers=config.publish.index_workers,
    )


def regenerate_index(config: Config, store: Any, report: UploadReport, *, channel: str, log: Log) -> None:
    from nightly import index as idx

    # Only files that really are in the store go into the pages, with the sha256 of what the
    # store holds: a failed upload's file is not listed (pip would get a 404), unless another
    # build put that very name there (one name, one set of bytes: the one that is there).
    there = {*report.uploaded, *report.skipped}
    known: dict[str, dict[str, str | FileRecord]] = {
        folder: {
            n: report.records.get(folder, {}).get(n) or s
            for n, s in files.items()
            if f"{store.url}/{folder}/{n}" not in report.failed or f"{store.url}/{folder}/{n}" in there
        }
        for folder, files in report.folders.items()
    }
    for folder in sorted(set(known) | set(report.removed)):
        try:
            idx.regenerate(
                store,
                [folder],
                full=False,
                known={folder: known.get(folder, {})},
                removed={folder: report.removed.get(folder, [])},
                options=index_options(config),
            )
            log(f"index pages regenerated: {store.url}/{folder}/")
        except (PublishError, OSError) as e:
            report.index_errors.append(f"{folder}: {e}")
            log(f"index of {folder} failed: {e} (pages left as they were; rerun `nightly upload`)")


def _publish_conda(
    config: Config,
    day: Day,
    state: State,
    files: list[tuple[str, dict[str, Any]]],
    *,
    channel: str,
    report: UploadReport,
    log: Log,
    signatures: signed.Signatures,
) -> None:
    pub = config.publish
    if pub.conda_channel:
        folder = conda_channel_dir(config, channel)
        dest = f"file://{folder}"
        try:
            written = set(
                conda.publish_to_channel(folder, [day.path / p["path"] for _, p in files])
            )
        except (PublishError, OSError) as e:
            report.failed[dest] = str(e)
            for bid, _ in files:
                state.update(bid, upload_error=f"{dest}: {e}")
            log(f"conda channel {folder}: {e}")
        else:
            signatures.copy_to_channel(folder, [(conda.channel_key(day.path / p["path"]),
                                                 p["name"], p["sha256"]) for _, p in files])
            for bid, p in files:
                key = conda.channel_key(day.path / p["path"])
                _record(state, bid, f"{dest}/{key}", p["sha256"])
                (report.uploaded if key in written else report.skipped).append(f"{dest}/{key}")
            log(f"conda channel {folder}: {len(written)} new package(s), repodata current")
    if pub.anaconda_user:
        label = pub.anaconda_label if channel == "nightly" else pub.anaconda_test_label
        try:
            token = anaconda.read_token(pub.token_env, pub.token_file)
        except PublishError as e:
            raise ConfigError(str(e), key="publish.conda") from e
        for bid, p in files:
            dest = f"anaconda:{pub.anaconda_user}/{label}/{p['name']}"
            if state.get(bid).published.get(dest) == p["sha256"]:
                report.skipped.append(dest)
                continue
            try:
                anaconda.anaconda_upload(
                    day.path / p["path"],
                    user=pub.anaconda_user,
                    label=label,
                    site=pub.anaconda_site or None,
                    token=token,
                    timeout=config.external_timeouts.anaconda_upload,
                )
            except (PublishError, OSError) as e:
                report.failed[dest] = str(e)
                state.update(bid, upload_error=f"{dest}: {e}")
                log(f"anaconda upload failed: {dest}: {e}")
                continue
            _record(state, bid, dest, p["sha256"])
            report.uploaded.append(dest)
            log(f"uploaded: {dest}")


def _record(state: State, bid: str, dest: str, sha256: str) -> None:
    state.add_published(bid, dest, sha256)


def record_publication(state: State, report: UploadReport) -> None:
    """The day's last publication outcome, in state.json's meta (summary.json's publish_error)."""
    errors = [*report.failed.values(), *report.index_errors]
    state.set_meta(publish_error="; ".join(errors)[:2000] if errors else None)
