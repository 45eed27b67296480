"""Publishing: object storage (S3 or a file:// mirror), index pages, retention."""

from nightly.publish.store import (
    FileStore,
    ObjectInfo,
    ObjectNotFound,
    PreconditionFailed,
    S3Store,
    Store,
    open_store,
    remote_folder,
)

__all__ = [
    "FileStore",
    "ObjectInfo",
    "ObjectNotFound",
    "PreconditionFailed",
    "S3Store",
    "Store",
    "open_store",
    "remote_folder",
]
