"""Retention on an adversarial tree, through `nightly prune` (it runs `rm -rf` from cron).

Locally only the old, valid, real day folders directly under ROOT go: not symlinks (to
outside ROOT, to other day folders, dangling), not names that merely look like dates
(2024_02_30, fullwidth digits, a trailing space, `.bak`), not files, not today, not a
future date, not the window's last day, not a folder whose lock a live process holds.
Remotely only old nightly objects go: never the newest version of a project, never the test
or release channel, never a file that is not a package; the pages follow.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.support.published import FIND_LINKS, check_tree, sha256_of

DATE = "2024_05_01"  # "today" for local retention; local_days = 5
DOOMED = ["2023_06_15", "2023_12_31", "2024_01_01", "2024_01_12", "2024_04_25"]
KEPT_DIRS = [
    "2024_04_26",  # exactly the window's last day
    "2024_04_30", "2024_05_01",  # recent, today
    "2024_05_02", "2099_12_31",  # the future
    "2024_01_11",  # old, but a live process holds its lock
    # Look like dates, are not.
    "2024_02_30", "2024_13_01", "2024_00_10", "2024_1_01", "24_01_01", "2024_01_01 ",
    "2024_01_01.bak", "2024-01-01", "２０２４_０１_０１", "2024_01_0１", "2024_01_01x", "x2024_01_01",
    ".2024_01_02", "notes", "release",
]  # fmt: skip
SYMLINKS = {
    "2024_01_06": "outside",  # a directory outside ROOT
    "2024_01_07": "root/2024_04_30",  # another (recent) day folder
    "2024_01_08": "root/2024_01_01",  # an old day folder that goes
    "2024_01_09": "nowhere",  # dangling
    "2024_01_10": "outside/precious.txt",  # a file
}


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` (not following symlinks): type, and content hash or target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            elif not p.is_file():
                out[rel] = "special"  # the fifo: never opened
            else:
                out[rel] = "file:" + hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def held_lock(tmp_path: Path) -> Iterator[Any]:
    """start(day_path): a live process holding that day's lock as DayLock does."""
    procs: list[subprocess.Popen[str]] = []

    def start(day: Path) -> None:
        code = ("import sys, time; from pathlib import Path; from nightly.workspace import DayLock; "
                "DayLock(Path(sys.argv[1])).acquire('run'); print('locked', flush=True); time.sleep(600)")
        proc = subprocess.Popen([sys.executable, "-c", code, str(day.parent / f"{day.name}.lock")],
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "locked"

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def build_tree(base: Path) -> Path:
    root = base / "root"
    root.mkdir()
    outside = base / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "precious.txt").write_text("must survive\n")
    (outside / "sub" / "more.txt").write_text("also\n")
    for name in DOOMED + KEPT_DIRS:
        d = root / name
        (d / "logs" / "succeeded").mkdir(parents=True)
        (d / "logs" / "succeeded" / "x.log").write_text(f"log of {name}\n")
        (d / "state.json").write_text("{}\n")
    # Inside folders that go: links out of ROOT (rm -rf must not follow them), a read-only
    # tree, a fifo.
    (root / "2024_01_01" / "link-out").symlink_to(outside)
    (root / "2024_01_01" / "link-file").symlink_to(outside / "precious.txt")
    ro = root / "2023_06_15" / "packages" / "ro"
    ro.mkdir(parents=True)
    (ro / "pkg.whl").write_text("x")
    ro.chmod(0o500)
    (root / "2023_06_15" / "packages").chmod(0o500)
    os.mkfifo(root / "2023_12_31" / "fifo")
    (root / "release" / "2.1.0").mkdir()
    (root / "release" / "2.1.0" / "state.json").write_text("{}\n")
    # Files with day names, and the ROOT-level files a night leaves.
    (root / "2024_01_03").write_text("a file named like a day\n")
    (root / "history.sqlite").write_text("not really sqlite\n")
    (root / "2024_01_12.lock").write_text('{"pid": 1, "released": "2024-01-12T08:00:00"}')  # stale
    for name, target in SYMLINKS.items():
        (root / name).symlink_to(base / target)
    return root


def test_prune_deletes_only_the_old_valid_day_folders(
    tmp_path: Path, run_cli: Any, held_lock: Any
) -> None:
    root = build_tree(tmp_path)
    held_lock(root / "2024_01_11")
    (tmp_path / "rootlink").symlink_to(root)  # ROOT itself reached through a symlink
    config = tmp_path / "nightly.toml"
    config.write_text("""\
root = "rootlink"
[project]
name = "demo"
source = "src"
base_version = "1.0.0"
[matrix.linux.manywheel]
pythons = ["3.8"]
cudas = ["cpu"]
[[machines]]
name = "m"
platform = "linux"
queues = 1
[retention]
local_days = 5
""")
    before = snapshot(root)
    outside_before = snapshot(tmp_path / "outside")

    code, out, err = run_cli(["prune", "--dry-run", "--config", str(config), "--date", DATE])
    assert code == 0, (out, err)
    listed = sorted(line.split(" ", 2)[2] for line in out.splitlines() if line.startswith("would delete "))
    assert listed == sorted(str(root / n) for n in DOOMED), out
    assert snapshot(root) == before, "--dry-run changed something"

    code, out, err = run_cli(["prune", "--config", str(config), "--date", DATE])
    assert code == 0, (out, err)
    assert "Traceback" not in err
    after = snapshot(root)
    gone = {p for p in before if p not in after}
    # A pruned day's lock file goes with it (2024_01_12's stale one); no other lock.
    assert {p.split("/")[0].removesuffix(".lock") for p in gone} == set(DOOMED), sorted(gone)
    assert not os.path.lexists(root / "2024_01_12.lock")
    assert all(after[p] == v for p, v in before.items()
               if p.split("/")[0].removesuffix(".lock") not in DOOMED)
    for name in DOOMED:
        assert not os.path.lexists(root / name)
    for name in KEPT_DIRS:
        assert (root / name / "logs/succeeded/x.log").read_text() == f"log of {name}\n", name
    for name, target in SYMLINKS.items():
        assert os.readlink(root / name) == str(tmp_path / target)
    assert snapshot(tmp_path / "outside") == outside_before, "something outside ROOT was touched"
    # The lock is still held, by the process that took it.
    from nightly.workspace import is_locked

    assert is_locked(root / "2024_01_11")


# ---------------------------------------------------------------------------- remote

NOW = datetime.now(timezone.utc)


def _wheel(name: str, version: str) -> str:
    return f"{name}-{version}-py3-none-any.whl"


def test_remote_retention_by_age_keeps_newest_test_release_and_strangers(
    tmp_path: Path, run_cli: Any
) -> None:
    """`[retention] remote_days = 30` alone (remote_versions left at 0: keep every version)
    deletes the nightly objects older than 30 days, except each project's newest."""
    from nightly.index import regenerate
    from nightly.stores import FileStore

    mirror = tmp_path / "mirror"
    store = FileStore(mirror)
    src = tmp_path / "src-files"
    src.mkdir()
    ages = {  # key -> age in days
        f"whl/nightly/cpu/{_wheel('demo_pkg', '1.0.0.dev20240101+cpu')}": 120,
        f"whl/nightly/cpu/{_wheel('demo_pkg', '1.0.0.dev20240301+cpu')}": 60,
        f"whl/nightly/cpu/{_wheel('demo_pkg', '1.0.0.dev20240420+cpu')}": 10,
        f"whl/nightly/cpu/{_wheel('other', '0.1.dev20240101')}": 120,  # its only version: kept
        "whl/nightly/cpu/README.txt": 300,  # not a package: never touched
        f"whl/nightly/cu100/{_wheel('demo_pkg', '1.0.0.dev20240101+cu100')}": 120,
        f"whl/nightly/cu100/{_wheel('demo_pkg', '1.0.0.dev20240102+cu100')}": 119,
        "libtorch/nightly/cpu/libtorch-shared-with-deps-1.0.0.dev20240101+cpu.zip": 120,
        "libtorch/nightly/cpu/libtorch-shared-with-deps-1.0.0.dev20240425+cpu.zip": 5,
        f"whl/test/cpu/{_wheel('demo_pkg', '0.9.0')}": 400,  # test channel: never
        f"whl/test/cpu/{_wheel('demo_pkg', '0.9.1')}": 300,
        f"whl/cpu/{_wheel('demo_pkg', '0.9.0')}": 400,  # release channel: never
        f"whl/cpu/{_wheel('demo_pkg', '0.8.0')}": 500,
    }
    doomed = {
        f"whl/nightly/cpu/{_wheel('demo_pkg', '1.0.0.dev20240101+cpu')}",
        f"whl/nightly/cpu/{_wheel('demo_pkg', '1.0.0.dev20240301+cpu')}",
        f"whl/nightly/cu100/{_wheel('demo_pkg', '1.0.0.dev20240101+cu100')}",
        "libtorch/nightly/cpu/libtorch-shared-with-deps-1.0.0.dev20240101+cpu.zip",
    }
    known: dict[str, dict[str, str]] = {}
    for i, key in enumerate(ages):
        f = src / f"f{i}"
        f.write_bytes(os.urandom(100) + key.encode())
        sha = sha256_of(f)
        store.put(key, f, sha)
        folder, _, name = key.rpartition("/")
        if not name.endswith(".txt"):
            known.setdefault(folder, {})[name] = sha
    regenerate(store, sorted(known), full=False, known=known, find_links_name=FIND_LINKS)
    for key, days in ages.items():
        t = (NOW - timedelta(days=days)).timestamp()
        os.utime(mirror / key, (t, t))
    expected = {f"{folder}/{name}": sha for folder, files in known.items() for name, sha in files.items()}

    config = tmp_path / "nightly.toml"
    config.write_text(f"""\
[project]
name = "demo"
source = "src"
base_version = "1.0.0"
[matrix.linux.manywheel]
pythons = ["3.8"]
cudas = ["cpu"]
[[machines]]
name = "m"
platform = "linux"
queues = 1
[retention]
remote_days = 30
[publish]
url = "{mirror.as_uri()}"
""")
    code, out, err = run_cli(["prune", "--config", str(config), "--date", DATE])
    assert code == 0, (out, err)
    deleted = sorted(line for line in out.splitlines() if line.startswith("delete "))
    assert deleted == sorted(f"delete {mirror.as_uri()}/{k}" for k in doomed), out
    for key in ages:
        assert (mirror / key).exists() == (key not in doomed), key
    remaining = {k: v for k, v in expected.items() if k not in doomed}
    check_tree(mirror, remaining)
