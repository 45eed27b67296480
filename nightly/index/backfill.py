"""`nightly index --backfill-metadata`: give wheels already in a bucket their PEP 658 core
metadata file (`<wheel>.metadata`), read from the wheel with ranged GETs, never by
downloading it.

Resumable by construction: each `.metadata` is one whole-object PUT, and a wheel whose
`.metadata` is already listed is skipped, so a run that was stopped is finished by the next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from nightly.errors import PublishError
from nightly.index.manifest import FileRecord
from nightly.index.metadata import METADATA_SUFFIX, METADATA_TYPE, CoreMetadata, from_store
from nightly.stores import ObjectInfo, Store

THREADS = 8


@dataclass
class BackfillReport:
    written: list[str] = field(default_factory=list)  # wheel keys that got a .metadata now
    present: int = 0  # wheels that had one already
    failed: dict[str, str] = field(default_factory=dict)  # wheel key -> why
    # folder -> wheel name -> the record, for the index run that follows
    records: dict[str, dict[str, FileRecord]] = field(default_factory=dict)
    objects: list[ObjectInfo] = field(default_factory=list)  # the .metadata objects written


def backfill_metadata(
    store: Store, listing: Sequence[ObjectInfo], *, log: Callable[[str], None]
) -> BackfillReport:
    """Write `<wheel>.metadata` for every wheel in `listing` that has none."""
    report = BackfillReport()
    keys = {o.key for o in listing}
    wheels = [o for o in listing if o.key.endswith(".whl")]
    todo = [o for o in wheels if o.key + METADATA_SUFFIX not in keys]
    report.present = len(wheels) - len(todo)

    def one(obj: ObjectInfo) -> CoreMetadata | str:
        try:
            md = from_store(store, obj.key, obj.size)
            store.put_bytes(obj.key + METADATA_SUFFIX, md.data, METADATA_TYPE)
        except (PublishError, OSError, ValueError) as e:
            return str(e)
        return md

    with ThreadPoolExecutor(THREADS) as pool:
        for obj, result in zip(todo, pool.map(one, todo), strict=True):
            if isinstance(result, str):
                report.failed[obj.key] = result
                log(f"no core metadata for {store.url}/{obj.key}: {result}")
                continue
            folder, _, name = obj.key.rpartition("/")
            report.written.append(obj.key)
            report.records.setdefault(folder, {})[name] = FileRecord(
                metadata_sha256=result.sha256, requires_python=result.requires_python
            )
            report.objects.append(ObjectInfo(obj.key + METADATA_SUFFIX, len(result.data), result.sha256))
    log(
        f"core metadata: {len(report.written)} written, {report.present} already there, "
        f"{len(report.failed)} failed"
    )
    return report
