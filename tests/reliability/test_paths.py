"""Paths nightly hands to tools are one argument each: a root (and a compiler cache folder)
with spaces, a tab, quotes and non-ASCII letters builds the demo project with the real
recipes, the compiler cache on, as a plain path does."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.projects import REPO, local_machine

ODD = "sp ace\ttab 'single' \"double\" é☃"


@pytest.mark.slow
def test_a_root_with_spaces_tabs_quotes_and_non_ascii_builds_with_the_cache_on(
    tmp_path: Path, run_cli: Any
) -> None:
    base = tmp_path / ODD
    src = base / "demo src"
    shutil.copytree(REPO / "examples" / "demo", src)
    cache_dir = base / "cache dir"
    config = base / "night config.toml"
    python = shutil.which("python3.11") or "/usr/bin/python3"
    config.write_text(f"""
root = "nightlies"
recipes = "{REPO / 'recipes'}"

[project]
name = "nightlydemo"
source = {json.dumps(str(src))}
base_version = "0.1.0"

[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]

{local_machine()}
[executor.local.pythons]
"3.11" = "{python}"

[cache]
dir = {json.dumps(str(cache_dir))}
""")
    root = base / f"nightlies {ODD}"
    code, out, err = run_cli(["run", "--config", str(config), "--root", str(root),
                              "--date", "2024_05_01"], cwd=base, timeout=900)
    day = root / "2024_05_01"
    logs = "".join(p.read_text() for p in (day / "logs").rglob("*.log")) if day.exists() else ""
    assert code == 0, out + err + logs[-4000:]
    entry = json.loads((day / "state.json").read_text())["builds"]["manywheel_3.11_cpu"]
    assert entry["status"] == "succeeded"
    # The extension was compiled through the cache (its folder is under the odd path too).
    assert "off" not in entry["cache"], entry["cache"]
    assert entry["cache"]["requests"] >= 1, entry["cache"]
    # The store is <dir>/<project>-<hash of the root>/<toolchain>/ (builds/cache_store.py).
    (store,) = cache_dir.glob("nightlydemo-*/host-cpu")
    assert any(store.rglob("*"))
    assert list((day / "packages" / "manywheel" / "cpu").glob("nightlydemo-*.whl"))
    # The link the wrappers were reached through is gone with the build.
    assert not [p for p in Path("/tmp").glob("nightly-cache-*") if p.is_symlink()
                and str(day) in os.readlink(p)]
