"""What the live progress display costs a night (issue 50).

    .venv/bin/python benchmarks/bench_progress.py [--rounds 3] [--queues 4]

A night of 98 stand-in builds (tests/support/projects.py: 14 Pythons x 7 accelerators, each
a bash recipe that prints a line and writes a small package at once, so that a build costs
what orchestrating it costs) run by `nightly run --no-upload` in a child process, three ways,
interleaved round by round:

  none   the baseline: no progress display at all (Progress replaced by a sink that only
         counts events; the history is still recorded)
  plain  stdout a pipe: one timestamped line per event (cron's output), live.json written
  live   stdout a pseudo-terminal (drained by this process): the rich live view redrawn on
         each event and every second, each running build's log followed, live.json written

The figure is the build phase's wall time (LocalPhase._run_queues, timed in the child) per
build; the ratios are against `none` of the same run. Results: benchmarks/results/progress.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from common import median, print_table, write_results  # noqa: E402

from tests.support.projects import FAKE_CUDAS, MAPPED_PYTHONS, write_project  # noqa: E402

MODES = ("none", "plain", "live")


def _matrix() -> str:
    pythons = ", ".join(f'"{p}"' for p in MAPPED_PYTHONS)
    cudas = ", ".join(f'"{c}"' for c in ("cpu", *FAKE_CUDAS))
    return f"[matrix.linux.manywheel]\npythons = [{pythons}]\ncudas = [{cudas}]\n"


def child(mode: str, config: str, out: str) -> None:
    """In the child: patch the mode in, run the night, write the build phase's time."""
    from nightly.builds.session import local_phase
    from nightly.cli.main import cli

    if mode == "none":
        class Sink:
            def __init__(self, **_: Any) -> None:
                self.events = 0

            def __call__(self, kind: str, info: Any) -> None:
                self.events += 1

            def log(self, line: str, *, queue: int | None = None) -> None:
                pass

            def __enter__(self) -> Sink:
                return self

            def __exit__(self, *_: object) -> None:
                pass

        local_phase.Progress = Sink  # type: ignore[assignment,misc]
    original = local_phase.LocalPhase._run_queues
    took: list[float] = []

    def timed(self: Any, *args: Any, **kwargs: Any) -> None:
        started = time.perf_counter()
        try:
            original(self, *args, **kwargs)
        finally:
            took.append(time.perf_counter() - started)

    local_phase.LocalPhase._run_queues = timed  # type: ignore[method-assign]
    try:
        cli.main(["run", "--config", config, "--date", "2024_05_01", "--no-upload"],
                 standalone_mode=False)
    finally:
        Path(out).write_text(json.dumps({"phase_s": took[0] if took else None}))


def _drain(fd: int, stop: threading.Event, got: list[int]) -> None:
    while not stop.is_set():
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                got[0] += len(os.read(fd, 65536))
            except OSError:
                return


def one_night(base: Path, mode: str, queues: int, n: int) -> tuple[float, int, int]:
    """(build phase seconds, builds, bytes written to stdout) of one night in `mode`."""
    p = write_project(base / f"{mode}-{n}", matrix=_matrix(), queues=queues)
    out = base / f"{mode}-{n}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode, str(p.config), str(out)]
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm-256color"}
    got = [0]
    if mode == "live":
        master, slave = pty.openpty()
        stop = threading.Event()
        reader = threading.Thread(target=_drain, args=(master, stop, got), daemon=True)
        reader.start()
        proc = subprocess.run(cmd, cwd=p.path, stdin=subprocess.DEVNULL, stdout=slave,
                              stderr=slave, env=env, timeout=1800, check=False)
        time.sleep(0.3)
        stop.set()
        reader.join()
        os.close(slave)
        os.close(master)
    else:
        proc = subprocess.run(cmd, cwd=p.path, stdin=subprocess.DEVNULL, capture_output=True,
                              env=env, timeout=1800, check=False)
        got[0] = len(proc.stdout)
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: nightly run failed ({proc.returncode}): "
                         f"{(proc.stderr or b'')[-2000:]!r}")
    state = json.loads((p.day / "state.json").read_text())
    builds = [b for b in state["builds"].values() if b.get("status") == "succeeded"]
    phase = json.loads(out.read_text())["phase_s"]
    return float(phase), len(builds), got[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--child", nargs=3, metavar=("MODE", "CONFIG", "OUT"))
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    per: dict[str, list[float]] = {m: [] for m in MODES}
    sizes: dict[str, int] = {}
    builds = 0
    with tempfile.TemporaryDirectory(prefix="bench-progress-") as tmp:
        for r in range(args.rounds):
            for mode in MODES:
                phase, builds, size = one_night(Path(tmp), mode, args.queues, r)
                per[mode].append(phase / builds)
                sizes[mode] = size
                print(f"round {r + 1} {mode:<5} {phase:7.2f} s for {builds} builds "
                      f"({phase / builds * 1000:.1f} ms a build), stdout {size} bytes", flush=True)
    base = median(per["none"])
    rows = [(m, round(median(per[m]) * 1000, 1), round(median(per[m]) / base, 3), sizes[m])
            for m in MODES]
    print_table(["mode", "ms per build (median)", "ratio to none", "stdout bytes"], rows,
                title=f"{builds} stand-in builds, {args.queues} queues, {args.rounds} rounds")
    write_results("progress", {
        "builds": builds, "queues": args.queues, "rounds": args.rounds,
        "ms_per_build": {m: [round(x * 1000, 2) for x in v] for m, v in per.items()},
        "median_ms_per_build": {m: round(median(v) * 1000, 2) for m, v in per.items()},
        "ratio_to_none": {m: round(median(v) / base, 3) for m, v in per.items()},
        "stdout_bytes": sizes,
    })


if __name__ == "__main__":
    main()
