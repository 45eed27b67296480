"""Publishing: object storage (S3 or a file:// mirror), index pages, retention."""

from nightly.publish.layout import remote_folder
from nightly.publish.stores import (
    FileStore,
    ObjectInfo,
    ObjectNotFound,
    PreconditionFailed,
    S3Store,
    Store,
    open_store,
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
