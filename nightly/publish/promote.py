"""Promotion: `nightly promote VERSION [--rc N]`.

It reads the test channel's files of that candidate, verifies their bytes (sha256 computed
from what was read, against the one recorded when the build finished) and their provenance
with the configured key, and only then writes exactly those bytes to the release destinations
(nightly.publish.promote_verify; a failure promotes nothing), regenerates the release index
pages, re-uploads conda packages under the release label and uploads wheels to a PyPI-style
index with twine when one is configured. It refuses an incomplete candidate unless
--allow-partial names what is left out. Everything it did is recorded in the candidate's
state.json, so promoting twice changes nothing.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nightly import index as idx
from nightly.channels import anaconda, conda, pypi
from nightly.config import Config
from nightly.errors import ConfigError, NotVerified, PublishError, UsageError
from nightly.files import sha256_file
from nightly.provenance import signed
from nightly.publish.promote_report import PromoteRecord, promoted_files, write_report
from nightly.publish.promote_verify import (
    Checked,
    check_test_file,
    publish_checked,
    released_matches,
)
from nightly.publish.upload import UploadReport, open_destination, regenerate_index
from nightly.redact import safe_url
from nightly.stores import Store
from nightly.stores.layout import conda_channel_dir, kind_of, remote_folder
from nightly.workspace import SUCCEEDED, Day, DayLock, State
from nightly.workspace.candidate import candidate_name, completeness, release_day

Log = Callable[[str], None]


@dataclass
class _Copy:
    """One file of the candidate to copy from the test folder to the release folder."""

    bid: str
    src: str
    dst: str
    sha256: str
    size: int | None
    done: bool = False  # already in the release folder, verified
    checked: Checked | None = None  # the test channel's bytes, read and verified


def promote(
    config: Config,
    version: str,
    rc: int | None,
    *,
    allow_partial: Sequence[str] = (),
    dry_run: bool = False,
    log: Log = print,
    machine: str = "",
) -> None:
    """Copy the candidate's test files to the release destinations.

    Everything is checked before anything is changed: the candidate is complete (or what is
    missing is allowed), the credentials are there, every test file is the one built, and no
    release destination holds a different file of the same name. Then the release channel's
    report (nightly.publish.promote_report; `machine` names it).
    """

    said: list[str] = []

    def log_and_keep(line: str) -> None:
        said.append(line)
        log(line)

    day = release_day(config, version, rc)
    rerun = f"nightly release {version}" + (f" --rc {rc}" if rc is not None else "")
    if not day.state_path.exists():
        raise UsageError(
            f"no release candidate {candidate_name(version, rc)} under {config.root}: "
            f"build it with `{rerun}` first"
        )
    lock = DayLock(day.lock_path).acquire("promote") if not dry_run else None
    try:
        state = State(day.state_path)
        before = promoted_files(state)
        twine = _promote_checked(config, version, rc, day, state, allow_partial,
                                 dry_run=dry_run, log=log_and_keep)
        if not dry_run:
            record = PromoteRecord(
                version=version, candidate=candidate_name(version, rc),
                machine=machine or "local", when=state.meta.promoted, twine=twine,
                lines=tuple(said))
            store = open_destination(config) if config.publish.url else None
            write_report(day, state, store, record, changed=promoted_files(state) != before,
                         log=log)
    finally:
        if lock is not None:
            lock.release()


def _promote_checked(
    config: Config, version: str, rc: int | None, day: Day, state: State,
    allow_partial: Sequence[str], *, dry_run: bool, log: Log,
) -> str:
    """promote()'s checks, then its changes; twine's result in words."""
    _check_candidate(config, day, state, candidate_name(version, rc), allow_partial, log)
    pub = config.publish
    rerun = f"nightly release {version}" + (f" --rc {rc}" if rc is not None else "")
    store = open_destination(config) if pub.url else None
    report = UploadReport()
    wheels, conda_files, copies = _candidate_files(day, state, store, report)
    pypi_todo = [
        (bid, path, sha) for bid, path, sha in wheels
        if pub.pypi_url and not _recorded(state, bid, _pypi_dest(pub.pypi_url, path.name), sha)
    ]
    # Credentials first: a missing one must not leave a half-promoted release.
    token = password = ""
    if conda_files and pub.anaconda_user and not dry_run:
        try:
            token = anaconda.read_token(pub.token_env, pub.token_file)
        except PublishError as e:
            raise ConfigError(str(e), key="publish.conda") from e
    if pypi_todo and not dry_run:
        password = _pypi_password(config)
    if store is not None:
        public_key = signed.public_key_of(config)
        if config.provenance.key is not None and public_key is None:
            raise ConfigError(f"cannot read the provenance key {config.provenance.key}: "
                              "promote verifies every file with it", key="provenance.key")
        day.work.mkdir(parents=True, exist_ok=True)  # the day's disk, not /tmp's
        with tempfile.TemporaryDirectory(prefix="promote-", dir=day.work) as tmp:
            _check_copies(store, copies, rerun, Path(tmp), public_key)
            _copy_all(store, state, copies, dry_run=dry_run, log=log)
    if store is not None and report.folders:
        _release_index(config, store, report, copied={c.dst for c in copies if not c.done},
                       dry_run=dry_run, log=log)
        if report.index_errors:
            raise PublishError("; ".join(report.index_errors))
    if conda_files and pub.conda_channel:
        _promote_conda_channel(config, day, state, conda_files, dry_run=dry_run, log=log)
    if conda_files and pub.anaconda_user:
        _promote_conda(config, day, state, conda_files, token=token, dry_run=dry_run, log=log)
    twine = ""
    if pypi_todo:
        twine = _promote_pypi(config, state, pypi_todo, password=password, dry_run=dry_run,
                              log=log)
    elif wheels and pub.pypi_url:
        twine = f"already uploaded to {safe_url(pub.pypi_url)}: {len(wheels)} wheel(s)"
        log(twine)
    if not dry_run:
        state.set_meta(promoted=dt.datetime.now().isoformat(timespec="seconds"))
    copied = sum(not c.done for c in copies)
    log(
        f"{'would promote' if dry_run else 'promoted'} {candidate_name(version, rc)}: "
        f"{copied} file(s) {'to copy' if dry_run else 'copied'}, "
        f"{len(copies) - copied} already promoted, in {len(report.folders)} folder(s)"
    )
    return twine


def _check_candidate(
    config: Config, day: Day, state: State, name: str, allow_partial: Sequence[str], log: Log
) -> None:
    """The candidate is complete (or what is missing is allowed) and its provenance verifies."""
    left_out, refused = completeness(config, state, allow_partial)
    if refused:
        raise UsageError(
            f"candidate {name} is incomplete: "
            f"{len(refused)} build(s) missing or failed: {', '.join(refused)}. "
            "Rebuild them, or name what is left out with --allow-partial GLOB"
        )
    if left_out:
        log(f"promoting without (--allow-partial): {', '.join(left_out)}")
    unverified = signed.unverified(config, day, state)
    if unverified:
        raise NotVerified(f"refusing to promote {name}: provenance "
                          f"does not verify for {'; '.join(unverified)}")


def _candidate_files(
    day: Day, state: State, store: object, report: UploadReport
) -> tuple[list[tuple[str, Path, str]], list[tuple[str, dict[str, object]]], list[_Copy]]:
    """The candidate's files: its wheels (build, path, sha256) for PyPI, its conda packages,
    and the copies from the test folders to the release folders (with a store)."""
    wheels: list[tuple[str, Path, str]] = []
    conda_files: list[tuple[str, dict[str, object]]] = []
    copies: list[_Copy] = []
    for bid, entry in sorted(state.builds.items()):
        if entry.status != SUCCEEDED:
            continue
        for pkg in (p.to_json() for p in entry.packages):
            package_type = entry.package or pkg["path"].split("/")[1]
            cuda = entry.cuda or pkg["path"].split("/")[2]
            kind = kind_of(package_type, pkg["name"])
            if kind == "conda":
                conda_files.append((bid, pkg))
                continue
            if kind is None:
                continue
            if kind == "whl":
                wheels.append((bid, day.path / pkg["path"], pkg["sha256"]))
            if store is None:
                continue
            folder = remote_folder(kind, "release", cuda)
            report.folders.setdefault(folder, {})[pkg["name"]] = pkg["sha256"]
            copies.append(_Copy(
                bid, f"{remote_folder(kind, 'test', cuda)}/{pkg['name']}",
                f"{folder}/{pkg['name']}", pkg["sha256"], pkg.get("size"),
            ))
    return wheels, conda_files, copies


def _copy_all(store: Store, state: State, copies: list[_Copy], *, dry_run: bool, log: Log) -> None:
    for c in copies:
        if c.done:
            log(f"already promoted: {store.url}/{c.dst}")
        elif dry_run:
            log(f"would copy {store.url}/{c.src} -> {store.url}/{c.dst}")
        else:
            _copy_verified(store, c, log)
        if not dry_run:
            _record(state, c.bid, f"{store.url}/{c.dst}", c.sha256)


def _check_copies(store: Store, copies: list[_Copy], rerun: str, tmp: Path,
                  public_key: Any) -> None:
    """Before anything is copied: each release destination is absent or already the file
    built, by its bytes (then `done`), and each test file still to be promoted is read from
    the test channel and verified (nightly.publish.promote_verify): its bytes' sha256 is the
    build's, its provenance there verifies with the configured key. Any failure: nothing
    promoted, naming each file and why."""
    problems: list[str] = []
    for c in copies:
        if store.head(c.dst) is not None:
            if released_matches(store, c.dst, c.sha256, c.size, tmp):
                c.done = True
            else:
                problems.append(
                    f"{store.url}/{c.dst} already exists and is not this candidate's file "
                    f"(its bytes are not the build's sha256 {c.sha256}): a released file is "
                    "never replaced; was another candidate of this version promoted?"
                )
            continue
        checked = check_test_file(store, c.src, sha256=c.sha256, size=c.size, tmp=tmp,
                                  public_key=public_key)
        if checked.problem:
            problems.append(checked.problem)
        c.checked = checked
    if problems:
        raise NotVerified("nothing promoted: " + "; ".join(problems) + f" (rerun `{rerun}` "
                          "to publish the built files to the test channel again)")


def _copy_verified(store: Store, c: _Copy, log: Log) -> None:
    """The verified test file (and its verified provenance) into the release folder, read
    back; a copy that does not verify is removed from the release folder."""
    assert c.checked is not None
    publish_checked(store, c.src, c.dst, c.checked, c.sha256)
    log(f"promoted: {c.dst} (sha256 verified)" + (
        ", its provenance verified" if c.checked.provenance is not None else ""))


def _release_index(
    config: Config, store: Store, report: Any, *, copied: set[str], dry_run: bool, log: Log
) -> None:
    """Regenerate the release pages of the folders that changed, or whose pages do not list
    the candidate's files yet (an earlier promote stopped halfway). A folder whose pages are
    already current is not written again, so promoting twice writes nothing."""

    stale = UploadReport()
    find_links = config.publish.find_links_name("release")
    for folder, files in sorted(report.folders.items()):
        if not any(d.startswith(folder + "/") for d in copied):
            manifest = idx.read_manifest(store, folder)
            if manifest.files is not None and all(
                (r := manifest.files.get(n)) is not None and r.sha256 == s for n, s in files.items()
            ):
                pages = idx.render_folder(manifest.files, find_links_name=find_links)
                if all(
                    (got := store.get_bytes(f"{folder}/{rel}")) is not None and got[0] == content
                    for rel, content in pages.items()
                ):
                    log(f"index pages current: {store.url}/{folder}/")
                    continue
        if dry_run:
            log(f"would regenerate the index pages of {store.url}/{folder}/")
            continue
        stale.folders[folder] = files
    if stale.folders:
        regenerate_index(config, store, stale, channel="release", log=log)
        report.index_errors.extend(stale.index_errors)


def _recorded(state: State, bid: str, dest: str, sha256: str) -> bool:
    return state.get(bid).promoted.get(dest) == sha256


def _record(state: State, bid: str, dest: str, sha256: str) -> None:
    if _recorded(state, bid, dest, sha256):
        return
    state.add_promoted(bid, dest, sha256)


def _pypi_dest(url: str, name: str) -> str:
    return f"pypi:{safe_url(url).rstrip('/')}/{name}"


def _pypi_password(config: Config) -> str:

    pub = config.publish
    password = os.environ.get(pub.pypi_password_env, "")
    if not password:
        raise UsageError(
            f"no password for {safe_url(pub.pypi_url)}: set the environment variable "
            f"{pub.pypi_password_env} (publish.pypi.password_env)"
        )
    return password


def _promote_conda_channel(
    config: Config,
    day: Day,
    state: State,
    files: list[tuple[str, dict[str, Any]]],
    *,
    dry_run: bool,
    log: Log,
) -> None:
    """Publish the candidate's conda packages (the bytes that were built and tested, checked
    against their recorded sha256) into the self-hosted release channel."""

    folder = conda_channel_dir(config, "release")
    paths = []
    for _, p in files:
        path = day.path / p["path"]
        if sha256_file(path) != p["sha256"]:
            raise PublishError(f"{path} changed since it was built (sha256 mismatch): not promoted")
        paths.append(path)
    if dry_run:
        for path in paths:
            log(f"would publish {path.name} to the conda channel {folder}")
        return
    written = conda.publish_to_channel(folder, paths)
    signed.on_disk(config, day, state).copy_to_channel(
        folder, [(conda.channel_key(p), p.name, f[1]["sha256"])
                 for p, f in zip(paths, files, strict=True)])
    for bid, p in files:
        _record(state, bid, f"file://{folder}/{conda.channel_key(day.path / p['path'])}", p["sha256"])
    log(f"conda channel {folder}: {len(written)} package(s) promoted, repodata current")


def _promote_conda(
    config: Config,
    day: Day,
    state: State,
    files: list[tuple[str, dict[str, Any]]],
    *,
    token: str,
    dry_run: bool,
    log: Log,
) -> None:
    """Copy each package on the server from the test label to the release label (the same
    bytes that were tested; --update leaves what is already there alone)."""

    pub = config.publish
    for bid, p in files:
        dest = f"anaconda:{pub.anaconda_user}/{pub.anaconda_label}/{p['name']}"
        if _recorded(state, bid, dest, p["sha256"]):
            log(f"already promoted: {dest}")
            continue
        path = day.path / p["path"]
        name, version, _ = p["name"].removesuffix(".conda").removesuffix(".tar.bz2").rsplit("-", 2)
        if dry_run:
            log(f"would copy {name} {version} from label {pub.anaconda_test_label} to {dest}")
            continue
        anaconda.anaconda_copy(
            pub.anaconda_user, name, version, conda.channel_key(path),
            from_label=pub.anaconda_test_label, to_label=pub.anaconda_label,
            site=pub.anaconda_site or None, token=token,
            timeout=config.external_timeouts.anaconda_copy,
        )
        _record(state, bid, dest, p["sha256"])
        log(f"promoted: {dest}")


def _promote_pypi(
    config: Config,
    state: State,
    wheels: list[tuple[str, Path, str]],
    *,
    password: str,
    dry_run: bool,
    log: Log,
) -> str:
    """twine upload of the wheels not yet recorded as uploaded; what it did, in words. A wheel
    the index already has counts as uploaded (promoting twice is harmless), but is named: if
    this candidate did not put it there, it may be another candidate's file of the same name."""

    pub = config.publish
    url = safe_url(pub.pypi_url)
    if dry_run:
        for _, w, _ in wheels:
            log(f"would upload {w.name} to {url} with twine")
        return ""
    skipped = set(pypi.twine_upload(
        [w for _, w, _ in wheels], repository_url=pub.pypi_url, username=pub.pypi_username,
        password=password, skip_existing=True, timeout=config.external_timeouts.twine_upload,
    ))
    for bid, w, sha in wheels:
        _record(state, bid, _pypi_dest(pub.pypi_url, w.name), sha)
        if w.name in skipped:
            log(f"warning: {url} already had {w.name}: not uploaded again (check that it is "
                "this candidate's file)")
    done = f"uploaded {len(wheels) - len(skipped)} wheel(s) to {url} with twine" + (
        f"; already on the index, not uploaded again: {', '.join(sorted(skipped))}"
        if skipped else "")
    log(done)
    return done
