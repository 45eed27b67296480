"""Remote retention: old nightly versions go from the nightly channel (local day folders
are pruned by nightly.workspace.prune).

Remote pruning only touches the nightly channel (`whl/nightly/…`, `libtorch/nightly/…`):
test and release folders never match, whatever the arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from packaging.version import Version

from nightly.errors import ConfigError, PublishError
from nightly.index import DEFAULT_FIND_LINKS, FolderReport, IndexOptions, regenerate
from nightly.index.metadata import METADATA_SUFFIX
from nightly.index.names import parse_package
from nightly.stores import ObjectInfo, Store
from nightly.stores.layout import NIGHTLY_KEY, NIGHTLY_PREFIXES

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- remote


def list_nightly(store: Store) -> Iterator[ObjectInfo]:
    for prefix in NIGHTLY_PREFIXES:
        yield from store.list(prefix)


def plan_remote_prune(
    objects: Iterable[ObjectInfo],
    keep_versions: int,
    older_than_days: int | None,
    now: datetime,
) -> list[str]:
    """Keys to delete from the nightly channel.

    Per folder and project, keep the newest `keep_versions` versions (all files of a
    version, e.g. one wheel per Python, count as one). With `older_than_days`, files older
    than that go too, except the project's newest version: a project never disappears.
    Files whose name does not parse as a package are left alone.
    """
    if keep_versions < 1:
        raise ConfigError(f"keep_versions must be 1 or more, not {keep_versions}", key="retention")
    cutoff = None
    if older_than_days is not None:
        cutoff = now.astimezone() - timedelta(days=older_than_days)
    groups: dict[tuple[str, str], dict[Version, list[ObjectInfo]]] = {}
    for obj in objects:
        m = NIGHTLY_KEY.fullmatch(obj.key)
        parsed = parse_package(m["name"]) if m else None
        if m is None or parsed is None:
            continue
        project, version = parsed
        groups.setdefault((m["folder"], project), {}).setdefault(version, []).append(obj)
    doomed: list[str] = []
    for versions in groups.values():
        ordered = sorted(versions, reverse=True)
        for rank, version in enumerate(ordered):
            for obj in versions[version]:
                too_old = (
                    cutoff is not None
                    and rank > 0
                    and obj.last_modified is not None
                    and obj.last_modified < cutoff
                )
                if rank >= keep_versions or too_old:
                    doomed.append(obj.key)
    return sorted(doomed)


def apply_remote_prune(
    store: Store,
    keys: Iterable[str],
    *,
    find_links_name: str = DEFAULT_FIND_LINKS,
    options: IndexOptions | None = None,
) -> list[FolderReport]:
    """Delete the planned keys (and a wheel's `.metadata` beside it), then drop them from
    their folders' manifests and pages.

    Objects go first: a concurrent full rebuild lists the bucket, and must not find (and
    re-add) a file that is about to be forgotten.
    """
    removed: dict[str, list[str]] = {}
    for key in keys:
        m = NIGHTLY_KEY.fullmatch(key)
        if m is None:
            raise PublishError(f"refusing to prune {key!r}: not in the nightly channel")
        store.delete(key)
        if key.endswith(".whl"):
            store.delete(key + METADATA_SUFFIX)
        removed.setdefault(m["folder"], []).append(m["name"])
    opts = options or IndexOptions(find_links_name=find_links_name)
    return regenerate(store, sorted(removed), full=False, removed=removed, options=opts)
