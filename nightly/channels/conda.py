"""Self-hosted conda channels: a channel folder, or a channel kept in a nightly Store,
indexed with py-rattler. (anaconda.org uploads are in `nightly.channels.anaconda`.)

One publisher for both: `publish_to_store_channel` publishes into a channel kept in a nightly
`Store` (S3, or a folder through the `file://` store: `publish_to_channel`) without downloading
the channel: packages go to `<subdir>/<file>` (the subdir read from the package's own
`info/index.json`) with `Store.ensure` (skipped when the object already has this sha256), and
each subdir's `repodata.json` is merged with the new entries (made by indexing the new files
locally with py-rattler) by compare-and-swap (`Store.update`), which is what makes concurrent
publishers safe.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import os
import shutil
import tempfile
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nightly.errors import PublishError
from nightly.jsonvalues import loads_bounded, read_json_file
from nightly.stores.base import file_sha256
from nightly.stores.layout import CONDA_SUFFIXES

if TYPE_CHECKING:
    from nightly.stores import Store

T = TypeVar("T")

LOCK_NAME = ".nightly-channel.lock"
# A channel's repodata.json: one entry of a few hundred bytes per package file, so far more
# than any nightly channel holds (conda-forge's largest subdir is about 300 MiB).
REPODATA_MAX_BYTES = 1 << 30


# -- package metadata ------------------------------------------------------------------------------


def _check_conda_name(path: Path) -> None:
    if not path.name.endswith(CONDA_SUFFIXES):
        raise PublishError(f"{path}: not a conda package (expected .conda or .tar.bz2)")


def package_subdir(path: Path) -> str:
    """The subdir (linux-64, noarch, ...) recorded in the package's own info/index.json."""
    path = Path(path)
    _check_conda_name(path)
    from rattler import IndexJson

    try:
        index = IndexJson.from_package_archive(path)
    except Exception as e:  # rattler raises its own exception types
        raise PublishError(f"{path}: cannot read info/index.json: {e}") from None
    subdir = index.subdir
    if not subdir:
        subdir = "noarch" if index.noarch else None
    if not subdir or "/" in subdir or subdir.startswith("."):
        raise PublishError(f"{path}: no usable subdir in info/index.json ({subdir!r})")
    return str(subdir)


def channel_key(path: Path) -> str:
    """Where a package goes in a channel: `<subdir>/<file name>`."""
    return f"{package_subdir(path)}/{Path(path).name}"


# -- self-hosted channel ---------------------------------------------------------------------------


def _run_coro(coro: Coroutine[object, object, T]) -> T:
    """asyncio.run, also from inside a running event loop (in a worker thread then)."""
    import asyncio  # only where conda packages are handled: every night imports this module

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def publish_to_channel(channel: Path, files: Sequence[Path]) -> list[str]:
    """Publish conda packages into a channel folder: the folder is a nightly Store
    (`file://`), published into like any other (publish_to_store_channel).

    Returns the keys (`<subdir>/<file>`) of the files written by this call; a file already
    there with the same sha256 is skipped (so publishing again returns [] and changes
    nothing), one with other content is replaced. Afterwards `repodata.json` of every subdir
    involved (and noarch's) lists each file with its current sha256.
    """
    from nightly.stores.folder import FileStore

    channel = Path(channel)
    try:
        channel.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PublishError(f"cannot create channel folder {channel}: {e}") from None
    return publish_to_store_channel(FileStore(channel), "", files)


def _scratch_records(items: Sequence[tuple[Path, str, str]]) -> dict[str, dict[str, dict[str, object]]]:
    """repodata entries of the given packages: {subdir: {section: {file name: entry}}}.

    Made by indexing a scratch channel holding only these files (hard links when possible).
    """
    from rattler import Subdir
    from rattler.index import index_fs

    out: dict[str, dict[str, dict[str, object]]] = {}
    with tempfile.TemporaryDirectory(prefix="nightly-conda-index-") as tmp:
        scratch = Path(tmp)
        subdirs = {"noarch"} | {subdir for _, subdir, _ in items}
        for subdir in subdirs:
            (scratch / subdir).mkdir()
        for src, subdir, _ in items:
            dest = scratch / subdir / src.name
            try:
                os.link(src, dest)
            except OSError:
                shutil.copyfile(src, dest)
        for subdir in sorted(subdirs):
            try:
                _run_coro(
                    index_fs(
                        scratch,
                        target_platform=Subdir(subdir),
                        write_zst=False,
                        write_shards=False,
                        force=True,
                    )
                )
            except Exception as e:  # rattler raises its own exception types
                raise PublishError(f"indexing packages for {subdir} failed: {e}") from None
            data = _repodata(scratch / subdir / "repodata.json")
            out[subdir] = {section: _section(data, section)
                           for section in ("packages", "packages.conda")}
    for src, subdir, sha in items:
        section = "packages.conda" if src.name.endswith(".conda") else "packages"
        entry = out.get(subdir, {}).get(section, {}).get(src.name)
        if not isinstance(entry, dict) or entry.get("sha256") != sha:
            raise PublishError(f"indexing {src.name} gave no repodata entry with its sha256")
    return out


def publish_to_store_channel(
    store: Store, prefix: str, files: Sequence[Path], *, attempts: int = 30
) -> list[str]:
    """Publish conda packages into a channel kept in a nightly Store (S3 or file://) under
    `prefix` (`""` for the store's root): `<prefix>/<subdir>/<file>` plus
    `<prefix>/<subdir>/repodata.json`.

    Packages go up with `Store.ensure` (skipped when the object already has this sha256).
    Each subdir's repodata.json is then updated by read-merge-write with a conditional write
    (If-Match on its ETag, If-None-Match when creating it), retried when another publisher
    won the race, so concurrent publishers never lose each other's entries and nothing is
    downloaded but repodata.json. Entries are made by py-rattler indexing the new files
    locally. Only repodata.json is written (no .zst, no shards), and entries of files deleted
    from the store are not removed here (that is retention's job). Returns the keys (relative
    to `prefix`) of the package files uploaded by this call.
    """
    base = prefix.strip("/")
    items: list[tuple[Path, str, str]] = []
    for f in files:
        f = Path(f)
        if not f.is_file():
            raise PublishError(f"cannot publish {f}: no such file")
        items.append((f, package_subdir(f), file_sha256(f)))
    if not items:
        return []
    records = _scratch_records(items)

    def key(rel: str) -> str:
        return f"{base}/{rel}" if base else rel

    written: list[str] = []
    for src, subdir, sha in items:
        if store.ensure(key(f"{subdir}/{src.name}"), src, sha):
            written.append(f"{subdir}/{src.name}")

    for subdir in sorted(records):
        repodata_key = key(f"{subdir}/repodata.json")
        store.update(
            repodata_key, functools.partial(_merge_repodata, subdir, records[subdir],
                                            f"{store.url}/{repodata_key}"),
            "application/json", what=f"{store.url}/{repodata_key}", rounds=attempts,
        )
    return written


def _merge_repodata(
    subdir: str, entries_by_section: dict[str, dict[str, Any]], where: str, current: bytes | None
) -> bytes | None:
    """repodata.json with these entries merged in; None when it has them all already."""
    if current is None:
        doc: dict[str, Any] = {"info": {"subdir": subdir}, "packages": {}, "packages.conda": {}}
        doc["repodata_version"] = 1
    else:
        try:
            got = loads_bounded(current, max_bytes=REPODATA_MAX_BYTES)
            if not isinstance(got, dict):
                raise ValueError("not an object")
            doc = got
        except ValueError as e:
            raise PublishError(f"{where} is not valid JSON ({e}); not touching it") from None
    changed = current is None
    for section, entries in entries_by_section.items():
        have = doc.setdefault(section, {})
        for name, entry in entries.items():
            old = have.get(name)
            if not isinstance(old, dict) or old.get("sha256") != entry["sha256"]:
                have[name] = entry
                changed = True
    return json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n" if changed else None


def install_from_channel(
    channel: Path,
    spec: str,
    prefix: Path,
    *,
    platform: str | None = None,
    cache_dir: Path | None = None,
) -> list[str]:
    """Solve `spec` against the channel folder alone and install it into `prefix` with py-rattler.

    Returns the names of the installed packages, sorted. Virtual packages (__glibc, __cuda, ...)
    are those of this machine. `cache_dir` holds the repodata and package caches (a temporary
    directory, removed afterwards, when not given).
    """
    from rattler import Channel, Gateway, Subdir, VirtualPackage, install, solve

    channel = Path(channel).resolve()
    if not (channel / "noarch" / "repodata.json").is_file():
        raise PublishError(f"{channel} is not an indexed conda channel (no noarch/repodata.json)")
    with contextlib.ExitStack() as stack:
        if cache_dir is None:
            cache_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nightly-rattler-")))
        cache_dir = Path(cache_dir)
        target = Subdir(platform) if platform else Subdir.current()

        async def run() -> list[str]:
            gateway = Gateway(cache_dir=cache_dir / "repodata")
            records = await solve(
                [Channel(channel.as_uri())],
                [spec],
                gateway=gateway,
                platforms=[target, Subdir("noarch")],
                virtual_packages=VirtualPackage.detect(),
            )
            await install(
                records,
                target_prefix=Path(prefix),
                cache_dir=cache_dir / "pkgs",
                platform=target,
                show_progress=False,
            )
            return sorted(r.name.normalized for r in records)

        try:
            return _run_coro(run())
        except PublishError:
            raise
        except Exception as e:  # rattler's solve/install errors
            raise PublishError(f"cannot install {spec!r} from {channel}: {e}") from None


def _repodata(path: Path) -> dict[str, object]:
    """The repodata.json py-rattler just wrote; PublishError when it is not one."""
    try:
        data = read_json_file(path, REPODATA_MAX_BYTES)
    except (OSError, ValueError) as e:
        raise PublishError(f"indexing wrote an unreadable {path.name}: {e}") from None
    if not isinstance(data, dict):
        raise PublishError(f"indexing wrote a {path.name} that is not a JSON object")
    return data


def _section(data: dict[str, object], section: str) -> dict[str, Any]:
    entries = data.get(section)
    return dict(entries) if isinstance(entries, dict) else {}
