"""The bucket layout (docs/folders.md, "The publishing layout"): which folder each kind of package goes to
in each channel, and how to read a folder's kind and channel back.

    kind      nightly                   test                   release
    whl       whl/nightly/<cuda>/       whl/test/<cuda>/       whl/<cuda>/
    libtorch  libtorch/nightly/<cuda>/  libtorch/test/<cuda>/  libtorch/<cuda>/
    conda     <publish.conda.channel>/nightly/  .../test/      .../release/  (conda channels)

Retention only ever touches the nightly channel (`NIGHTLY_PREFIXES`); index pages are made
for the folders under `INDEX_PREFIXES` that hold packages.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from nightly.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from nightly.config import Config

STORE_KINDS = ("whl", "libtorch")  # kinds kept in the store, under a folder of their own name
CHANNELS = ("nightly", "test", "release")
CONDA_SUFFIXES = (".conda", ".tar.bz2")
INDEX_PREFIXES = tuple(f"{kind}/" for kind in STORE_KINDS)
NIGHTLY_PREFIXES = tuple(f"{kind}/nightly/" for kind in STORE_KINDS)
# A file directly inside a folder of the nightly channel: whl/nightly/cu126/<name>.
NIGHTLY_KEY = re.compile(r"(?P<folder>(?:whl|libtorch)/nightly/[^/]+)/(?P<name>[^/]+)")

_CUDA_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def remote_folder(kind: str, channel: str, cuda: str) -> str:
    """The folder (key prefix, no trailing slash) of one kind/channel/cuda.

    nightly -> `whl/nightly/cu126`, test -> `whl/test/cu126`, release -> `whl/cu126`.
    """
    if kind not in STORE_KINDS:
        raise ConfigError(f"unknown package kind {kind!r}", hint=did_you_mean(kind, STORE_KINDS))
    if channel not in CHANNELS:
        raise ConfigError(f"unknown channel {channel!r}", hint=did_you_mean(channel, CHANNELS))
    if not _CUDA_RE.fullmatch(cuda):
        raise ConfigError(f"invalid cuda tag {cuda!r}")
    return f"{kind}/{cuda}" if channel == "release" else f"{kind}/{channel}/{cuda}"


def kind_of(package_type: str, filename: str) -> str | None:
    """'whl', 'libtorch', 'conda' or None (not something we publish)."""
    if filename.endswith(".whl"):
        return "whl"
    if package_type == "libtorch" and filename.endswith(".zip"):
        return "libtorch"
    if filename.endswith(CONDA_SUFFIXES):
        return "conda"
    return None


def channel_of(folder: str) -> str:
    """The channel of a folder: whl/nightly/cu126 and the channel root whl/nightly -> nightly,
    whl/cu126 and whl -> release."""
    parts = folder.strip("/").split("/")
    return parts[1] if len(parts) >= 2 and parts[1] in ("nightly", "test") else "release"


def channel_root(folder: str) -> str:
    """The root folder of the channel a folder is in: whl/nightly/cu126 -> whl/nightly,
    whl/cu126 -> whl. Accelerator folders are the channel root's direct sub-folders."""
    parts = folder.strip("/").split("/")
    return "/".join(parts[:2]) if len(parts) >= 2 and parts[1] in ("nightly", "test") else parts[0]


def conda_channel_dir(config: Config, channel: str) -> Path:
    """The self-hosted conda channel of one release channel: nightly, test and release are
    separate channels (folders) under publish.conda.channel, so a candidate never mixes
    with nightlies."""
    return Path(config.publish.conda_channel) / channel
