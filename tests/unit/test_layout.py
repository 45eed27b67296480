"""The bucket layout: where each kind of package goes per channel, and reading it back."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from nightly.errors import ConfigError
from nightly.stores.layout import (
    NIGHTLY_KEY,
    channel_of,
    conda_channel_dir,
    kind_of,
    remote_folder,
)


def test_remote_folder_layout() -> None:
    assert remote_folder("whl", "nightly", "cu126") == "whl/nightly/cu126"
    assert remote_folder("libtorch", "nightly", "cpu") == "libtorch/nightly/cpu"
    assert remote_folder("whl", "test", "cpu") == "whl/test/cpu"
    assert remote_folder("whl", "release", "cu118") == "whl/cu118"
    with pytest.raises(ConfigError, match="did you mean 'nightly'"):
        remote_folder("whl", "nighty", "cpu")
    with pytest.raises(ConfigError):
        remote_folder("whl", "nightly", "../cpu")
    with pytest.raises(ConfigError, match="unknown package kind"):
        remote_folder("conda", "nightly", "cpu")


def test_channel_read_back_from_the_folder() -> None:
    for channel in ("nightly", "test", "release"):
        for kind in ("whl", "libtorch"):
            assert channel_of(remote_folder(kind, channel, "cu126")) == channel


def test_kind_of_files() -> None:
    assert kind_of("manywheel", "torch-2.1.0-cp311-cp311-linux_x86_64.whl") == "whl"
    assert kind_of("libtorch", "libtorch-shared-with-deps-2.1.0+cpu.zip") == "libtorch"
    assert kind_of("manywheel", "notes.zip") is None
    assert kind_of("conda", "pytorch-2.1.0-py3.11_0.tar.bz2") == "conda"
    assert kind_of("conda", "pytorch-2.1.0-py3.11_0.conda") == "conda"
    assert kind_of("conda", "build.log") is None


def test_only_nightly_keys_are_nightly() -> None:
    assert NIGHTLY_KEY.fullmatch("whl/nightly/cu126/torch-2.1.0-py3-none-any.whl")
    assert NIGHTLY_KEY.fullmatch("libtorch/nightly/cpu/libtorch-2.1.0.zip")
    assert not NIGHTLY_KEY.fullmatch("whl/test/cu126/torch-2.1.0-py3-none-any.whl")
    assert not NIGHTLY_KEY.fullmatch("whl/cu126/torch-2.1.0-py3-none-any.whl")
    assert not NIGHTLY_KEY.fullmatch("whl/nightly/cu126/sub/torch-2.1.0-py3-none-any.whl")


def test_conda_channels_are_separate_folders() -> None:
    config = cast(Any, SimpleNamespace(publish=SimpleNamespace(conda_channel="/srv/conda")))
    assert conda_channel_dir(config, "nightly") == Path("/srv/conda/nightly")
    assert conda_channel_dir(config, "release") == Path("/srv/conda/release")
