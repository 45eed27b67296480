"""`nightly bisect` with the compiler cache against without it (issue 29).

    .venv/bin/python benchmarks/bench_bisect.py [--gen 24]

The demo project's 64-commit history of tests/integration/bisect_history.py (one commit
breaks the CUDA build with a header include, one on the search's path fails differently and
is skipped), with `--gen` generated C files that every build compiles (-O2), so that a build
costs what compiling costs. Two nights (good, bad), then the same bisect of the CUDA failure
on the same day folder (its bisect folder removed in between): with `[cache] enabled = false`
(the baseline), with the cache (the bisect's own cache folder, cold at its start: see
nightly.bisect.run.step_config), and with that cache warm (the same bisect again). Each must
name the breaking commit.

The nights run without the cache: with it, night 2's CUDA build is served night 1's object
(sccache's preprocessor cache mode checks the header at night 1's path, still on disk; the
bug that step_config keeps out of bisects) and does not fail.

Results: benchmarks/results/bisect.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from common import format_table, write_results  # noqa: E402

from tests.integration.bisect_history import BREAK, DAY1, DAY2, make_history, write_recipes  # noqa: E402

NIGHTLY = REPO / ".venv" / "bin" / "nightly"
CUDA = "manywheel_3.12_cu130"


def config_text(base: Path, *, cache: bool) -> str:
    cuda = base / "fake-cuda"
    (cuda / "bin").mkdir(parents=True, exist_ok=True)
    return f"""\
root = "nightlies"

[project]
name = "demo"
source = "src"
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = ["3.12"]
cudas = ["cpu", "cu130"]

[[machines]]
name = "m"
platform = "linux"
queues = 1
executor = "local"

[executor.local.pythons]
"3.12" = "{sys.executable}"

[executor.local.cuda]
"cu130" = "{cuda}"

[cache]
enabled = {"true" if cache else "false"}
dir = "{base / 'sccache'}"
"""


def nightly(*args: str) -> tuple[int, str]:
    proc = subprocess.run([str(NIGHTLY), *args], capture_output=True, text=True, check=False,
                          timeout=3600)
    return proc.returncode, proc.stdout + proc.stderr


def bisect_once(config: Path, day: Path) -> dict[str, Any]:
    shutil.rmtree(day / "bisect", ignore_errors=True)
    started = time.perf_counter()
    code, out = nightly("bisect", CUDA, "--config", str(config), "--date", DAY2)
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"nightly bisect failed:\n{out}")
    result = json.loads((day / "bisect" / CUDA / "result.json").read_text())
    hits = misses = 0
    for step in result["steps"]:
        state = json.loads((day / "bisect" / CUDA / step["commit"] / "state.json").read_text())
        cache = state["builds"][CUDA].get("cache") or {}
        hits += int(cache.get("hits") or 0)
        misses += int(cache.get("misses") or 0)
    return {"wall_s": round(wall, 2), "builds": len(result["steps"]),
            "first_bad": result["first_bad"],
            "step_s": [s["duration_s"] for s in result["steps"]],
            "hit_rate": round(hits / (hits + misses), 3) if hits + misses else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gen", type=int, default=24, help="generated C files per build")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-bisect-"))
    try:
        write_recipes(base)
        h = make_history(base, gen=args.gen)
        with_cache, without = base / "nightly.toml", base / "nightly-nocache.toml"
        with_cache.write_text(config_text(base, cache=True))
        without.write_text(config_text(base, cache=False))
        for date in (DAY1, DAY2):
            code, out = nightly("run", "--config", str(without), "--date", date, "--no-upload")
            if code not in (0, 1):
                raise SystemExit(f"night {date} failed to run:\n{out}")
        day = base / "nightlies" / DAY2
        runs = {"no_cache": bisect_once(without, day), "cache": bisect_once(with_cache, day),
                "cache_warm": bisect_once(with_cache, day)}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for name, r in runs.items():
        assert r["first_bad"] == h.commits[BREAK], (name, r)
    ratio = round(runs["cache"]["wall_s"] / runs["no_cache"]["wall_s"], 3)
    warm = round(runs["cache_warm"]["wall_s"] / runs["no_cache"]["wall_s"], 3)
    data = {"gen_files": args.gen, "commits": 64, **runs, "cache_over_no_cache": ratio,
            "warm_cache_over_no_cache": warm}
    print(format_table(["bisect of the CUDA failure", "wall s", "builds", "hit rate"],
                       [[k, r["wall_s"], r["builds"], r["hit_rate"] if r["hit_rate"] is not None else "-"]
                        for k, r in runs.items()]))
    print(f"cache / no cache: {ratio}; warm cache / no cache: {warm}")
    print(write_results("bisect", data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
