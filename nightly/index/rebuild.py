"""`nightly index --full [--backfill-metadata]`: every folder's pages from one listing.

The bucket is listed once (per index prefix); every folder that holds packages (and, with
aggregate pages, every channel root above them) is rebuilt from that listing, so a full run
costs one listing plus a request per object nothing has recorded yet (see `index`).
"""

from __future__ import annotations

from collections.abc import Callable

from nightly import index as idx
from nightly.index.backfill import backfill_metadata
from nightly.index.manifest import FileRecord
from nightly.stores import Store
from nightly.stores.layout import channel_root


def rebuild_all(
    store: Store, options: idx.IndexOptions, *, backfill: bool, log: Callable[[str], None]
) -> list[idx.FolderReport]:
    listing = idx.list_index_prefixes(store, workers=min(options.workers, idx.LIST_WORKERS))
    known: dict[str, dict[str, FileRecord]] = {}
    if backfill:
        result = backfill_metadata(store, listing, log=log)
        listing += result.objects
        known = result.records
    folders = idx.discover_folders(store, listing=listing)
    if options.aggregate:
        folders = sorted(set(folders) | {channel_root(f) for f in folders})
    reports = idx.regenerate(
        store, folders, full=True, known=known, options=options, listing=listing, log_line=log
    )
    for r in reports:
        log(f"regenerated {store.url}/{r.folder}/ ({r.files} files, {r.heads} HEADs, "
            f"{r.metadata_reads} metadata reads, {r.metadata_shared} more with the same bytes)")
    return reports
