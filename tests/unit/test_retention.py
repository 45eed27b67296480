"""Retention: local day-folder pruning on adversarial trees, and the remote plan."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nightly.errors import ConfigError, PublishError
from nightly.index import read_manifest, regenerate
from nightly.publish.retention import apply_remote_prune, plan_remote_prune
from nightly.stores import FileStore, ObjectInfo, file_sha256
from nightly.workspace import apply_local_prune, parse_day, plan_local_prune
from tests.support.staged import staged_nightly

TODAY = date(2026, 11, 21)


def never_locked(_: Path) -> bool:
    return False


def locked_names(*names: str) -> Callable[[Path], bool]:
    return lambda p: p.name in names


def day(root: Path, name: str) -> Path:
    path = root / name
    (path / "logs" / "succeeded").mkdir(parents=True)
    (path / "logs" / "succeeded" / "x.log").write_text("ok")
    return path


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """ROOT with every kind of entry a careless `rm -rf` would get wrong, and OUTSIDE."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "canary").write_text("must survive")
    for name in ("2026_11_01", "2026_11_10", "2026_11_20", "2026_11_21", "2026_12_01"):
        day(root, name)
    day(root, "2026_11_06")  # locked
    for name in ("2026_02_30", "2026_13_01", "2026_1_05", "26_11_01", "2026-11-01", "latest"):
        day(root, name)
    day(root, "2026_11_02.bak")
    (root / "2026_11_03").write_text("a file, not a folder")
    (root / "2026_11_04").symlink_to(outside)  # a day name pointing out of root
    (root / "2026_11_05").symlink_to(root / "2026_11_20")  # pointing at a day to keep
    (root / "2026_11_07").symlink_to(root / "2026_11_01")  # pointing at a day to delete
    (root / "2026_11_08").symlink_to(tmp_path / "dangling")
    # Inside an old day folder: a link out of root, which must be unlinked, not followed.
    (root / "2026_11_01" / "link-out").symlink_to(outside)
    (root / "2026_11_01" / "link-file").symlink_to(outside / "canary")
    return root, outside


def test_plan_picks_only_real_old_day_folders(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    plan = plan_local_prune(root, TODAY, 7, locked_names("2026_11_06"))
    assert [p.name for p in plan] == ["2026_11_01", "2026_11_10"]
    assert all(p.parent == root.resolve() for p in plan)


def test_apply_deletes_without_following_symlinks(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    is_locked = locked_names("2026_11_06")
    result = apply_local_prune(root, plan_local_prune(root, TODAY, 7, is_locked), is_locked)
    assert [p.name for p in result.deleted] == ["2026_11_01", "2026_11_10"]
    assert not result.failed
    assert not result.skipped
    assert (outside / "canary").read_text() == "must survive"
    kept = {p.name for p in root.iterdir()}
    assert {"2026_11_06", "2026_11_20", "2026_11_21", "2026_12_01", "2026_02_30"} <= kept
    # The symlinks themselves stay (they are not day folders), and so do their targets.
    assert (root / "2026_11_04").is_symlink()
    assert (root / "2026_11_05").is_symlink()
    assert (root / "2026_11_20" / "logs").is_dir()


def test_keep_zero_never_deletes_today_or_future(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    plan = plan_local_prune(root, TODAY, 0, never_locked)
    names = [p.name for p in plan]
    assert {"2026_11_20", "2026_11_06"} <= set(names)
    assert not {"2026_11_21", "2026_12_01"} & set(names)


def test_negative_keep_days_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        plan_local_prune(tmp_path, TODAY, -1, never_locked)


def test_missing_root_plans_nothing(tmp_path: Path) -> None:
    assert plan_local_prune(tmp_path / "nope", TODAY, 3, never_locked) == []


def test_root_reached_through_a_symlink(tree: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = tree
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    plan = plan_local_prune(alias, TODAY, 7, locked_names("2026_11_06"))
    assert [p.name for p in plan] == ["2026_11_01", "2026_11_10"]
    assert apply_local_prune(alias, plan, never_locked).deleted == plan
    assert not (root / "2026_11_01").exists()


def test_apply_rechecks_each_folder(tree: tuple[Path, Path], tmp_path: Path) -> None:
    root, outside = tree
    plan = plan_local_prune(root, TODAY, 7, never_locked)
    assert [p.name for p in plan] == ["2026_11_01", "2026_11_06", "2026_11_10"]
    # Between plan and apply: one folder becomes a symlink, another gets locked.
    shutil.rmtree(root / "2026_11_01")
    (root / "2026_11_01").symlink_to(outside)
    result = apply_local_prune(root, plan, locked_names("2026_11_06"))
    assert [p.name for p in result.deleted] == ["2026_11_10"]
    assert dict((p.name, why) for p, why in result.skipped) == {
        "2026_11_01": "symlink",
        "2026_11_06": "locked",
    }
    assert (outside / "canary").exists()


def test_apply_refuses_paths_outside_root(tree: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = tree
    elsewhere = tmp_path / "elsewhere"
    day(elsewhere, "2020_01_01")
    result = apply_local_prune(
        root, [elsewhere / "2020_01_01", root / "latest", root / ".." / "outside"], never_locked
    )
    assert not result.deleted
    assert [why for _, why in result.skipped] == [
        "outside root",
        "not a day folder",
        "not a day folder",
    ]
    assert (elsewhere / "2020_01_01").is_dir()


def test_lock_check_failure_keeps_the_folder(tree: tuple[Path, Path]) -> None:
    root, _ = tree

    def broken(_: Path) -> bool:
        raise PermissionError("cannot read the lock")

    assert plan_local_prune(root, TODAY, 7, broken) == []


def _read_only_tree(root: Path) -> Path:
    old = day(root, "2026_01_01")
    sub = old / "packages" / "conda" / "cpu"
    sub.mkdir(parents=True)
    (sub / "pkg.tar.bz2").write_bytes(b"x")
    (sub / "pkg.tar.bz2").chmod(0o444)
    (old / "unreadable").mkdir()
    (old / "unreadable" / "f").write_text("y")
    (old / "unreadable").chmod(0)
    sub.chmod(0o555)
    (old / "packages").chmod(0o555)
    old.chmod(0o555)
    return old


def test_read_only_tree_is_deleted(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    old = _read_only_tree(root)
    result = apply_local_prune(root, plan_local_prune(root, TODAY, 1, never_locked), never_locked)
    assert result.deleted == [old.resolve()]
    assert not old.exists()


def _unprivileged_python() -> str | None:
    """An interpreter `nobody` may run (the venv's may live under /root), same version."""
    for candidate in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if not candidate:
            continue
        try:
            probe = subprocess.run(
                [candidate, "-c", "import sys; print(tuple(sys.version_info[:2]))"],
                user=65534,
                group=65534,
                capture_output=True,
                text=True,
                check=False,
            )
        except OSError:
            continue
        if probe.returncode == 0 and probe.stdout.strip() == str(tuple(sys.version_info[:2])):
            return candidate
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="only needed when root ignores permissions")
def test_read_only_tree_is_deleted_by_an_unprivileged_user() -> None:
    """As root, permissions are not enforced; run the deletion as `nobody` to mean it."""
    python = _unprivileged_python()
    if python is None:
        pytest.fail("no Python interpreter the user `nobody` can run (e.g. /usr/bin/python3)")
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        base.chmod(0o755)
        root = base / "root"
        root.mkdir()
        old = _read_only_tree(root)
        for dirpath, _, filenames in os.walk(base):
            os.chown(dirpath, 65534, 65534)
            for f in filenames:
                os.chown(os.path.join(dirpath, f), 65534, 65534)
        old.chmod(0o555)
        code = (
            "from datetime import date; from pathlib import Path\n"
            "from nightly.workspace import plan_local_prune, apply_local_prune\n"
            f"root = Path({str(root)!r}); free = lambda p: False\n"
            "plan = plan_local_prune(root, date(2026, 11, 21), 1, free)\n"
            "r = apply_local_prune(root, plan, free)\n"
            "assert [p.name for p in r.deleted] == ['2026_01_01'], r\n"
        )
        # nightly staged where `nobody` can read it: this checkout may be under a 0700 home.
        with staged_nightly(dists=("packaging",)) as staged:
            proc = subprocess.run(
                [python, "-c", code],
                user=65534,
                group=65534,
                env={"PYTHONPATH": str(staged.site), "PATH": "/usr/bin:/bin"},
                cwd="/tmp",
                capture_output=True,
                text=True,
                check=False,
            )
        assert proc.returncode == 0, proc.stderr
        assert not old.exists()
    finally:
        for dirpath, _, _ in os.walk(base):
            os.chmod(dirpath, stat.S_IRWXU)
        shutil.rmtree(base)


def test_parse_day_examples() -> None:
    assert parse_day("2026_11_21") == date(2026, 11, 21)
    assert parse_day("2024_02_29") == date(2024, 2, 29)
    for bad in (
        "2026_02_30",
        "2025_02_29",
        "2026_00_10",
        "2026_11_00",
        "2026_11_1",
        " 2026_11_21",
        "2026_11_21\n",
        "２０２６_11_21",
        "0000_01_01",
    ):
        assert parse_day(bad) is None, bad


@given(st.integers(1, 9999), st.integers(0, 99), st.integers(0, 99))
def test_parse_day_agrees_with_the_calendar(y: int, m: int, d: int) -> None:
    name = f"{y:04d}_{m:02d}_{d:02d}"
    try:
        expected: date | None = date(y, m, d)
    except ValueError:
        expected = None
    assert parse_day(name) == expected


# --------------------------------------------------------------------------- remote

NOW = datetime(2026, 11, 21, 12, tzinfo=timezone.utc)


def obj(key: str, age_days: float = 0) -> ObjectInfo:
    return ObjectInfo(key=key, size=1, last_modified=NOW - timedelta(days=age_days))


def nightly_objects() -> list[ObjectInfo]:
    objs = []
    for n, dd in enumerate(range(15, 22)):
        age = 21 - dd
        for py in ("cp310", "cp311"):
            v = f"2.6.0.dev202611{dd}+cpu"
            objs.append(obj(f"whl/nightly/cpu/torch-{v}-{py}-{py}-linux_x86_64.whl", age))
        objs.append(obj(f"whl/nightly/cu126/torchvision-0.21.0.dev202611{dd}-py3-none-any.whl", age + n * 0))
        objs.append(obj(f"libtorch/nightly/cpu/libtorch-shared-with-deps-2.6.0.dev202611{dd}+cpu.zip", age))
    objs += [
        obj("whl/cpu/torch-2.5.0+cpu-cp311-cp311-linux_x86_64.whl", 400),  # release
        obj("whl/cpu/torch-2.4.0+cpu-cp311-cp311-linux_x86_64.whl", 800),  # release
        obj("whl/test/cpu/torch-2.6.0-cp311-cp311-linux_x86_64.whl", 400),  # test channel
        obj("whl/nightly/cpu/index.html", 100),
        obj("whl/nightly/cpu/torch/index.html", 100),
        obj("whl/nightly/cpu/.index.json", 100),
        obj("whl/nightly/cpu/torch_nightly.html", 100),
        obj("whl/nightly/cpu/not-a-version-latest.zip", 100),
        obj("whl/nightly/torch-1.0.0.dev20200101-py3-none-any.whl", 900),  # not in a cuda folder
        obj("whl/nightly/cpu/sub/torch-1.0.0.dev20200101-py3-none-any.whl", 900),
    ]
    return objs


def test_remote_keeps_newest_versions_per_folder_and_project() -> None:
    doomed = plan_remote_prune(nightly_objects(), 3, None, NOW)
    assert all(k.startswith(("whl/nightly/", "libtorch/nightly/")) for k in doomed)
    kept_dates = {"20261119", "20261120", "20261121"}
    for key in doomed:
        assert not any(d in key for d in kept_dates), key
    # 4 old dates x (2 torch wheels + 1 torchvision + 1 libtorch)
    assert len(doomed) == 16
    assert not any(k.endswith((".html", ".json", "latest.zip")) for k in doomed)
    assert not any("/sub/" in k or k.count("/") == 2 for k in doomed)


def test_remote_age_limit_keeps_the_newest_version() -> None:
    objs = [
        obj("whl/nightly/cpu/demo-1.0.0.dev20261101-py3-none-any.whl", 20),
        obj("whl/nightly/cpu/demo-1.0.0.dev20261102-py3-none-any.whl", 19),
        obj("whl/nightly/cpu/demo-1.0.0.dev20261103-py3-none-any.whl", 18),
    ]
    assert plan_remote_prune(objs, 10, 5, NOW) == [objs[0].key, objs[1].key]
    assert plan_remote_prune(objs, 10, 30, NOW) == []
    assert plan_remote_prune(objs, 1, None, NOW) == [objs[0].key, objs[1].key]


def test_remote_versions_compare_as_versions_not_strings() -> None:
    objs = [
        obj("whl/nightly/cpu/demo-1.10.0.dev20261101-py3-none-any.whl"),
        obj("whl/nightly/cpu/demo-1.9.0.dev20261121-py3-none-any.whl"),
    ]
    assert plan_remote_prune(objs, 1, None, NOW) == [objs[1].key]


def test_remote_keep_versions_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        plan_remote_prune([], 0, None, NOW)


def test_apply_remote_prune_updates_pages(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "mirror")
    src = tmp_path / "w.whl"
    src.write_bytes(b"wheel")
    sha = file_sha256(src)
    names = [f"demo-1.0.0.dev202611{d}-py3-none-any.whl" for d in (19, 20, 21)]
    for name in names:
        store.put(f"whl/nightly/cpu/{name}", src, sha)
    regenerate(store, ["whl/nightly/cpu"], full=True)
    doomed = plan_remote_prune(list(store.list("whl/")), 2, None, NOW)
    assert doomed == [f"whl/nightly/cpu/{names[0]}"]
    apply_remote_prune(store, doomed)
    assert store.head(doomed[0]) is None
    manifest = read_manifest(store, "whl/nightly/cpu")
    assert manifest.digests() == {names[1]: sha, names[2]: sha}
    page = (tmp_path / "mirror" / "whl/nightly/cpu/demo/index.html").read_text()
    assert names[0] not in page
    assert names[2] in page
    with pytest.raises(PublishError, match="not in the nightly channel"):
        apply_remote_prune(store, ["whl/cpu/demo-1.0.0-py3-none-any.whl"])


def test_a_date_in_the_future_never_reaches_today_or_the_days_before(tmp_path: Path) -> None:
    """--date 2099_01_01: days are counted back from the real today, not from 2099."""
    from datetime import timedelta

    real = date.today()
    names = {(real + timedelta(days=d)).strftime("%Y_%m_%d"): d for d in (-10, -3, -1, 0, 1, 30)}
    for name in names:
        day(tmp_path, name)
    plan = plan_local_prune(tmp_path, date(2099, 1, 1), 5, never_locked)
    assert [names[p.name] for p in plan] == [-10]


def test_a_prune_result_reads_as_a_sentence(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    is_locked = locked_names("2026_11_06")
    plan = plan_local_prune(root, TODAY, 7, never_locked)  # 2026_11_06 locked only later
    text = str(apply_local_prune(root, plan, is_locked))
    assert text.splitlines()[0] == "deleted 2 day folder(s), skipped 1"
    assert "skipped" in text.splitlines()[1]
    assert "(locked)" in text
    assert "PruneResult" not in text
