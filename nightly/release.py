"""Release builds and promotion.

`nightly release VERSION [--rc N]` is a night with channel `test` and BUILD_VERSION=VERSION,
in its own folder `ROOT/release/VERSION[-rcN]/` (retention only ever looks at dated folders
directly under ROOT, so it never touches releases), published to the test destinations.

`nightly promote VERSION [--rc N]` copies exactly the test channel's files of that candidate
to the release destinations (S3 server-side copy), checks every copy's sha256 against the one
recorded when the build finished, regenerates the release index pages, re-uploads conda
packages under the release label and uploads wheels to a PyPI-style index with twine when one
is configured. It refuses an incomplete candidate unless --allow-partial names what is left
out. Everything it did is recorded in the candidate's state.json, so promoting twice changes
nothing.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nightly.config import Config
from nightly.errors import PublishError, UsageError
from nightly.workspace import SUCCEEDED, Day, DayLock, State

Log = Callable[[str], None]


def candidate_name(version: str, rc: int | None) -> str:
    return f"release/{version}" + (f"-rc{rc}" if rc is not None else "")


def check_version(version: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        Version(version)
    except InvalidVersion as e:
        raise UsageError(f"'{version}' is not a version (PEP 440), e.g. 2.1.0") from e
    if ".dev" in version:
        raise UsageError(f"'{version}' is a development version; releases are e.g. 2.1.0")
    return version


def release_day(config: Config, version: str, rc: int | None) -> Day:
    return Day(config.root, dt.date.today(), name=candidate_name(version, rc))


def completeness(
    config: Config, state: State, allow_partial: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(builds left out and allowed, builds missing or failed and not allowed)."""
    allowed: list[str] = []
    refused: list[str] = []
    for b in config.builds:
        entry = state.get(b.id)
        if entry.get("status") == SUCCEEDED and entry.get("packages"):
            continue
        (allowed if any(fnmatch.fnmatchcase(b.id, g) for g in allow_partial) else refused).append(
            b.id
        )
    return allowed, refused


def promote(
    config: Config,
    version: str,
    rc: int | None,
    *,
    allow_partial: Sequence[str] = (),
    dry_run: bool = False,
    log: Log = print,
) -> int:
    """Copy the candidate's test files to the release destinations. Exit code."""
    from nightly.publish.store import remote_folder
    from nightly.publish.upload import UploadReport, kind_of, open_destination, regenerate_index

    day = release_day(config, version, rc)
    if not day.state_path.exists():
        raise UsageError(
            f"no release candidate {candidate_name(version, rc)} under {config.root}: "
            f"build it with `nightly release {version}" + (f" --rc {rc}" if rc is not None else "")
            + "` first"
        )
    lock = DayLock(day.lock_path).acquire("promote") if not dry_run else None
    try:
        state = State(day.state_path)
        left_out, refused = completeness(config, state, allow_partial)
        if refused:
            raise UsageError(
                f"candidate {candidate_name(version, rc)} is incomplete: "
                f"{len(refused)} build(s) missing or failed: {', '.join(refused)}. "
                "Rebuild them, or name what is left out with --allow-partial GLOB"
            )
        if left_out:
            log(f"promoting without (--allow-partial): {', '.join(left_out)}")
        pub = config.publish
        store = open_destination(config) if pub.url else None
        report = UploadReport()
        wheels: list[Path] = []
        conda_files: list[tuple[str, dict[str, Any]]] = []
        for bid, entry in sorted(state.builds.items()):
            if entry.get("status") != SUCCEEDED:
                continue
            cuda = str(entry.get("cuda"))
            for pkg in entry.get("packages", []):
                kind = kind_of(str(entry.get("package")), pkg["name"])
                if kind == "conda":
                    conda_files.append((bid, pkg))
                    continue
                if kind is None:
                    continue
                if kind == "whl":
                    wheels.append(day.path / pkg["path"])
                if store is None:
                    continue
                src = f"{remote_folder(kind, 'test', cuda)}/{pkg['name']}"
                folder = remote_folder(kind, "release", cuda)
                dst = f"{folder}/{pkg['name']}"
                report.folders.setdefault(folder, {})[pkg["name"]] = pkg["sha256"]
                if dry_run:
                    log(f"would copy {store.url}/{src} -> {store.url}/{dst}")
                    continue
                _copy_verified(store, src, dst, pkg["sha256"], log)
                _record(state, bid, f"{store.url}/{dst}", pkg["sha256"])
        if store is not None and not dry_run and report.folders:
            regenerate_index(config, store, report, channel="release", log=log)
            if report.index_errors:
                raise PublishError("; ".join(report.index_errors))
        if conda_files and pub.anaconda_user:
            _promote_conda(config, day, state, conda_files, dry_run=dry_run, log=log)
        if wheels and pub.pypi_url:
            _promote_pypi(config, wheels, dry_run=dry_run, log=log)
        if not dry_run:
            state.set_meta(promoted=dt.datetime.now().isoformat(timespec="seconds"))
        log(
            f"{'would promote' if dry_run else 'promoted'} {candidate_name(version, rc)}: "
            f"{sum(len(v) for v in report.folders.values())} file(s) in "
            f"{len(report.folders)} folder(s)"
        )
        return 0
    finally:
        if lock is not None:
            lock.release()


def _copy_verified(store: Any, src: str, dst: str, sha256: str, log: Log) -> None:
    """Server-side copy, then check the copy's sha256 against the build's record."""
    there = store.head(dst)
    if there is not None and there.sha256 == sha256:
        log(f"already promoted: {dst}")
        return
    source = store.head(src)
    if source is None:
        raise PublishError(
            f"{store.url}/{src} is not in the test channel: run `nightly upload` for the "
            "candidate first"
        )
    if source.sha256 != sha256:
        raise PublishError(
            f"{store.url}/{src} has sha256 {source.sha256}, not the build's {sha256}: refusing "
            "to promote a file that is not the one built"
        )
    store.copy(src, dst)
    copied = store.head(dst)
    if copied is None or copied.sha256 != sha256:
        raise PublishError(f"the copy {store.url}/{dst} does not verify (sha256 mismatch)")
    log(f"promoted: {dst} (sha256 verified)")


def _record(state: State, bid: str, dest: str, sha256: str) -> None:
    promoted = dict(state.get(bid).get("promoted") or {})
    promoted[dest] = sha256
    state.update(bid, promoted=promoted)


def _promote_conda(
    config: Config,
    day: Day,
    state: State,
    files: list[tuple[str, dict[str, Any]]],
    *,
    dry_run: bool,
    log: Log,
) -> None:
    """Copy each package on the server from the test label to the release label (the same
    bytes that were tested; --update leaves what is already there alone)."""
    import nightly.publish.conda as conda

    pub = config.publish
    token = "" if dry_run else conda.read_token(pub.token_env, pub.token_file)
    for bid, p in files:
        dest = f"anaconda:{pub.anaconda_user}/{pub.anaconda_label}/{p['name']}"
        if (state.get(bid).get("promoted") or {}).get(dest) == p["sha256"]:
            log(f"already promoted: {dest}")
            continue
        path = day.path / p["path"]
        name, version, _ = p["name"].removesuffix(".conda").removesuffix(".tar.bz2").rsplit("-", 2)
        if dry_run:
            log(f"would copy {name} {version} from label {pub.anaconda_test_label} to {dest}")
            continue
        conda.anaconda_copy(
            pub.anaconda_user, name, version, conda.channel_key(path),
            from_label=pub.anaconda_test_label, to_label=pub.anaconda_label,
            site=pub.anaconda_site or None, token=token,
        )
        _record(state, bid, dest, p["sha256"])
        log(f"promoted: {dest}")


def _promote_pypi(config: Config, wheels: list[Path], *, dry_run: bool, log: Log) -> None:
    import os

    from nightly.publish import pypi

    pub = config.publish
    if dry_run:
        for w in wheels:
            log(f"would upload {w.name} to {pub.pypi_url} with twine")
        return
    password = os.environ.get(pub.pypi_password_env, "")
    if not password:
        raise UsageError(
            f"no password for {pub.pypi_url}: set the environment variable "
            f"{pub.pypi_password_env} (publish.pypi.password_env)"
        )
    pypi.twine_upload(
        wheels, repository_url=pub.pypi_url, username=pub.pypi_username, password=password,
        skip_existing=True,
    )
    log(f"uploaded {len(wheels)} wheel(s) to {pub.pypi_url} with twine")
