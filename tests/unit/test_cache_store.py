"""The compiler cache's store (nightly/builds/cache/store.py): nightly's alone, one per project
and toolchain; a build's view of it, and its new entries taken in without ever replacing one."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path
from typing import Any, cast

import pytest

from nightly.builds.cache import store as cs
from nightly.builds.cache import wiring as cc
from nightly.config.timeouts import default_timeouts
from nightly.executors.base import Job

KEY_A = "a" * 64
KEY_B = "b" * 64


def _job(base: Path) -> Job:
    work = base / "work" / "manywheel_3.12_cpu"
    return Job(build_id="manywheel_3.12_cpu", package="manywheel", python="3.12", cuda="cpu",
               env={}, recipes_dir=base / "recipes", source_dir=base / "source",
               output_dir=work / "out", work_dir=work / "scratch", timeout_s=60)


def _entry(folder: Path, key: str, data: bytes) -> Path:
    path = folder / key[0] / key[1] / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _attach(settings: cc.CacheSettings, base: Path) -> cc.BuildCache:
    job = _job(base)
    job.work_dir.mkdir(parents=True)
    attached, note = cc.attach(settings, job)
    assert note is None
    assert isinstance(attached.cache, cc.BuildCache)
    return attached.cache


def test_a_project_never_receives_another_projects_entries(tmp_path: Path) -> None:
    """Two projects on one [cache] dir: what one project's build stored is in neither the
    other's store nor its builds' views."""
    top = tmp_path / "cache"
    one = cc.CacheSettings(dir=top, namespace=cs.namespace("one", tmp_path / "n1"))
    other = cc.CacheSettings(dir=top, namespace=cs.namespace("other", tmp_path / "n2"))
    assert one.namespace != other.namespace
    first = _attach(one, tmp_path / "b1")
    assert first.storage is not None
    assert first.store is not None
    _entry(first.storage, KEY_A, b"project one's object")
    job = _job(tmp_path / "b1")
    assert cc.take_in(dataclasses.replace(job, cache=first)) == []
    assert (first.store / "a" / "a" / KEY_A).read_bytes() == b"project one's object"
    # The same project's next build gets it; the other project's never does.
    again = _attach(one, tmp_path / "b2")
    assert again.storage is not None
    assert (again.storage / "a" / "a" / KEY_A).read_bytes() == b"project one's object"
    stranger = _attach(other, tmp_path / "b3")
    assert stranger.storage is not None
    assert stranger.store is not None
    assert list(cs.entries(stranger.storage)) == []
    assert list(cs.entries(stranger.store)) == []
    assert not stranger.store.is_relative_to(first.store)
    assert not first.store.is_relative_to(stranger.store)


def test_settings_of_a_config_name_the_projects_store() -> None:
    class Project:
        name = "demo"

    class Config:
        cache = cc.CacheSettings()
        project = Project()
        root = "/srv/nightlies"
        external_timeouts = default_timeouts()

    class Section:
        enabled, dir, size, url = True, Path("/c"), "1G", ""
        endpoint_url = region = profile = ""

    Config.cache = Section()  # type: ignore[assignment]
    settings = cc.settings_of(cast(Any, Config()))  # a stand-in with the fields it reads
    assert settings.namespace == cs.namespace("demo", "/srv/nightlies")
    assert settings.namespace.startswith("demo-")
    assert cs.namespace("demo", "/srv/other") != settings.namespace


def test_an_entry_rewritten_in_a_view_never_replaces_the_stores(tmp_path: Path) -> None:
    store, view = tmp_path / "store", tmp_path / "view"
    cs.ensure(store, tmp_path)
    clean = _entry(store, KEY_A, b"clean object")
    assert cs.fill_view(store, view, copy=True) == 1
    copied = view / "a" / "a" / KEY_A
    assert not os.path.samefile(copied, clean)  # the build's own inode
    copied.write_bytes(b"poisoned object")  # the build rewrites its copy
    _entry(view, KEY_B, b"new object")
    (view / "a" / "a" / ("c" * 64)).symlink_to(clean)  # a link is never taken in
    (view / "notes.txt").write_text("not an entry")
    assert cs.take_in(view, store) == 1
    assert clean.read_bytes() == b"clean object"
    assert (store / "b" / "b" / KEY_B).read_bytes() == b"new object"
    assert not (store / "a" / "a" / ("c" * 64)).exists()
    assert not (store / "notes.txt").exists()
    # Nightly's own file, not the build's inode.
    assert not os.path.samefile(store / "b" / "b" / KEY_B, view / "b" / "b" / KEY_B)


def test_a_store_another_user_could_write_is_refused(tmp_path: Path) -> None:
    top = tmp_path / "cache"
    top.mkdir()
    top.chmod(0o777)
    with pytest.raises(OSError, match="is not a folder only nightly's user writes"):
        cs.ensure(top / "ns" / "host-cpu", top)
    top.chmod(0o755)
    cs.ensure(top / "ns" / "host-cpu", top)
    assert stat.S_IMODE((top / "ns").stat().st_mode) == 0o700
    settings = cc.CacheSettings(dir=top, namespace="ns")
    (top / "ns").chmod(0o777)
    job = _job(tmp_path / "b")
    job.work_dir.mkdir(parents=True)
    same, note = cc.attach(settings, job)
    assert same.cache is None
    assert note is not None
    assert "compiler cache off" in note
    assert "ns" in note


def test_evict_keeps_the_store_under_its_cap(tmp_path: Path) -> None:
    store = tmp_path / "store"
    old = _entry(store, KEY_A, b"x" * 600)
    os.utime(old, (1, 1))
    new = _entry(store, KEY_B, b"y" * 600)
    assert cs.size_bytes("1K") == 1024
    assert cs.size_bytes("10G") == 10 << 30
    assert cs.evict(store, 1024) == 1
    assert not old.exists()
    assert new.exists()
