"""A year of nights in the build history: what grows, and what stays flat.

    .venv/bin/python benchmarks/bench_history_year.py [--nights 365] [--builds 164] [--quick]

Records N generated nights of B builds (PyTorch's 164 by default, one package file each, one
build in ten failing, a few failing for months) through nightly's own History.record, as
the night's recorder does, into two histories: one kept whole, one pruned each night to
`[retention] history_days = 90` as the night's prune step does. At night 30 (the baseline,
measured in the same run) and at the last night it measures what each night pays: opening
the history (its integrity check), the scheduler's estimates for every build, the failure
facts' reads of every failing build, and recording one build; then the file sizes. Ratios
near 1 mean flat: the cost does not grow with the nights kept. Recording with one held
connection is compared with a connection opened and closed per record (the old way).
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common

from nightly.history.db import History
from nightly.history.retention import prune_history

T0 = dt.date(2026, 1, 1)


def entry(i: int, status: str, started: float) -> dict[str, Any]:
    return {
        "status": status, "reason": None if status == "succeeded" else "exit 1",
        "exit_status": 0 if status == "succeeded" else 1, "started": started,
        "ended": started + 600 + i, "duration_s": 600.0 + i, "attempts": 1, "machine": "m",
        "queue": i % 5, "executor": "container", "package": "manywheel", "python": "3.12",
        "cuda": "cpu", "variant": "",
        "packages": [{"name": f"pkg{i}-1.0-cp312-cp312-manylinux_2_28_x86_64.whl",
                      "path": f"packages/manywheel/cpu/pkg{i}.whl", "size": 10**8 + i,
                      "sha256": "ab" * 32}] if status == "succeeded" else [],
        "published": {}, "log": f"logs/succeeded/b{i}.log",
    }


def record_night(h: History, n: int, ids: list[str], broken: set[str], rng: random.Random) -> None:
    day = T0 + dt.timedelta(days=n)
    started = time.mktime(day.timetuple())
    for i, bid in enumerate(ids):
        failed = bid in broken or rng.random() < 0.1
        h.record(day.strftime("%Y_%m_%d"), bid, entry(i, "failed" if failed else "succeeded",
                                                      started + i), commit=f"c{n}")


def costs(path: Path, ids: list[str], failing: list[str], day: str) -> dict[str, float]:
    """Seconds: open (integrity check), estimates of every build, failure facts' reads."""
    out: dict[str, float] = {}
    h, out["open"] = common.timed(lambda: History(path))
    _, out["estimates"] = common.timed(lambda: h.estimates(ids))
    _, out["facts"] = common.timed(lambda: [h.outcomes(b, before=day) for b in failing])
    h.close()
    return out


def per_record(path: Path, ids: list[str], n: int, *, held: bool) -> float:
    """Milliseconds per recorded build on a copy of the night after `n`."""
    h = History(path)
    day = (T0 + dt.timedelta(days=n + 1)).strftime("%Y_%m_%d")
    started = time.perf_counter()
    for i, bid in enumerate(ids):
        h.record(day, bid, entry(i, "succeeded", 1.0 + i), commit="x")
        if not held:
            h.close()  # the old History: a connection opened and closed (checkpointed) per call
    ms = (time.perf_counter() - started) * 1000 / len(ids)
    h.close()
    return ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--builds", type=int, default=164)
    ap.add_argument("--quick", action="store_true", help="90 nights of 40 builds")
    args = ap.parse_args()
    nights, builds = (90, 40) if args.quick else (args.nights, args.builds)
    ids = [f"manywheel_3.{10 + i % 6}_b{i}" for i in range(builds)]
    broken = set(ids[:3])  # failing from night 10 for the rest of the year
    rng = random.Random(7)
    work = Path(tempfile.mkdtemp(prefix="bench-history-"))
    kept, pruned = History(work / "kept.sqlite"), History(work / "pruned.sqlite")
    at: dict[str, dict[str, float]] = {}
    base = 30
    for n in range(nights):
        night_rng = random.Random(rng.random())
        for h in (kept, pruned):
            record_night(h, n, ids, broken if n >= 10 else set(), random.Random(night_rng.random()))
        prune_history(pruned, T0 + dt.timedelta(days=n), 90)
        if n + 1 in (base, nights):
            day = (T0 + dt.timedelta(days=n + 1)).strftime("%Y_%m_%d")
            for name, h in (("kept", kept), ("pruned", pruned)):
                h.close()
                at[f"{name}@{n + 1}"] = costs(h.path, ids, sorted(broken), day)
                at[f"{name}@{n + 1}"]["size_mb"] = h.path.stat().st_size / 1e6
                at[f"{name}@{n + 1}"]["rows"] = float(len(h.days()))
    kept.close()
    pruned.close()
    held = per_record(work / "kept.sqlite", ids, nights, held=True)
    per_call = per_record(work / "kept.sqlite", ids, nights + 1, held=False)
    rows = []
    for what in ("open", "estimates", "facts"):
        for name in ("kept", "pruned"):
            first, last = at[f"{name}@{base}"][what], at[f"{name}@{nights}"][what]
            rows.append([f"{what} ({name})", f"{first * 1000:.2f} ms", f"{last * 1000:.2f} ms",
                         f"{last / first:.2f}" if first else "-"])
    for name in ("kept", "pruned"):
        rows.append([f"size MB ({name})", f"{at[f'{name}@{base}']['size_mb']:.1f}",
                     f"{at[f'{name}@{nights}']['size_mb']:.1f}",
                     f"{at[f'{name}@{nights}']['size_mb'] / at[f'{name}@{base}']['size_mb']:.2f}"])
    rows.append(["record one build, held / per-call connection", f"{per_call:.2f} ms",
                 f"{held:.2f} ms", f"{held / per_call:.2f}"])
    common.print_table(["what", f"night {base}", f"night {nights}", "ratio"], rows,
                       title=f"history over {nights} nights of {builds} builds")
    common.write_results("history_year", {"nights": nights, "builds": builds, "at": at,
                                          "record_ms_held": held, "record_ms_per_call": per_call})
    return 0


if __name__ == "__main__":
    sys.exit(main())
