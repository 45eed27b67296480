"""The published folders a full index run works on: one listing of everything under the index
prefixes (`list_index_prefixes`, its first levels listed side by side) and the folders in it
that hold a package (`discover_folders`). Re-exported by `nightly.index`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from nightly.index.names import is_package
from nightly.stores import ObjectInfo, Store
from nightly.stores.layout import INDEX_PREFIXES

LIST_SPLIT = 2  # levels listed with a delimiter before folders are listed side by side
LIST_WORKERS = 8


def list_index_prefixes(
    store: Store, prefixes: Iterable[str] = INDEX_PREFIXES, *, workers: int = LIST_WORKERS
) -> list[ObjectInfo]:
    """One listing of everything under the index prefixes (what a full run works from), in
    key order. A listing is one page of 1,000 keys after another, so a bucket's takes as many
    round trips as it has pages; instead the first LIST_SPLIT levels (whl/, whl/nightly/)
    are listed with a delimiter and the folders below them (whl/nightly/cu126/) side by side,
    `workers` at a time. A failed page raises: nothing is built from part of a listing."""
    objects: list[ObjectInfo] = []
    level = list(prefixes)
    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="index-list") as pool:
        for _ in range(LIST_SPLIT):
            below: list[str] = []
            for found, subs in pool.map(store.list_level, level):
                objects += found
                below += subs
            level = below
        for part in pool.map(lambda p: list(store.list(p)), level):
            objects += part
    objects.sort(key=lambda o: o.key.encode())  # S3's order: UTF-8 bytes
    return objects


def discover_folders(
    store: Store, prefixes: Iterable[str] = INDEX_PREFIXES, *, listing: Sequence[ObjectInfo] | None = None
) -> list[str]:
    """Every folder under `prefixes` that directly holds a package (one full listing)."""
    objects = listing if listing is not None else list_index_prefixes(store, prefixes)
    found: set[str] = set()
    for obj in objects:
        folder, _, name = obj.key.rpartition("/")
        if folder and is_package(name):
            found.add(folder)
    return sorted(found)
