"""The live view follows a rerun's own lines (issue 57): a rerun appends to the build's log,
and the view showed `repairing` through the whole compile, read from the previous attempt's
`auditwheel repair`."""

from __future__ import annotations

from pathlib import Path

from nightly.builds.view.liveview import LogWatch

FIRST = ("=" * 78 + "\nnightly build manywheel_3.9_cpu  (attempt 1)\nwhere:    image\n"
         "[manywheel] running: auditwheel repair -w /w/wheelhouse x.whl\n"
         "[manywheel] ERROR: the wheel cannot meet the manylinux policy\n")
SECOND = ("=" * 78 + "\nnightly build manywheel_3.9_cpu  (attempt 2)\nwhere:    image\n"
          "[ 40%] Building Fortran object CMakeFiles/_flsolve.dir/solve.f90.o\n")


def test_a_rerun_shows_its_own_phase_not_the_previous_attempts(tmp_path: Path) -> None:
    log = tmp_path / "manywheel_3.9_cpu.log"
    log.write_text(FIRST + SECOND)
    watch = LogWatch(log)  # a view that starts during the rerun reads the log's end
    watch.poll()
    assert watch.phase is None  # the runner's own phase (building) stands
    assert watch.last_line == "[ 40%] Building Fortran object CMakeFiles/_flsolve.dir/solve.f90.o"
    with log.open("a") as f:
        f.write("[manywheel] running: auditwheel repair -w /w/wheelhouse y.whl\n")
    watch.poll()
    assert watch.phase == "repairing"  # this attempt's repair is still seen


def test_a_view_following_the_log_drops_the_phase_when_the_next_attempt_starts(
    tmp_path: Path,
) -> None:
    log = tmp_path / "b.log"
    log.write_text(FIRST)
    watch = LogWatch(log)
    watch.poll()
    assert watch.phase == "repairing"
    with log.open("a") as f:
        f.write(SECOND)
    watch.poll()
    assert watch.phase is None


def _frame(width: int) -> str:
    from rich.console import Console

    from nightly.builds.view.liveview import render
    from nightly.workspace.live import LiveBuild, LiveState

    line = "[manywheel] the build runs CMake for flsolve with gfortran 10 (bullseye)"
    state = LiveState(pid=1, started=1000.0, updated=1010.0, total=2, done=0, failed=0,
                      estimate_s=600.0, estimate_source="config", builds=(
                          LiveBuild(queue=1, build="manywheel_3.9_cpu", phase="building",
                                    started=1000.0, estimate_s=300.0, last_line=line),))
    con = Console(record=True, width=width, force_terminal=True, color_system=None)
    con.print(render(state, 1010.0, width))
    return con.export_text()


def test_an_80_column_frame_shows_the_log_line_whole_and_no_estimate_note() -> None:
    """Issue 57: at 80 columns the line was cut to `[manywheel] the bu...` and the two-line
    estimates note (printed once when the view starts) was repeated under every frame."""
    text = _frame(80)
    assert "[manywheel] the build runs CMake for flsolve with gfortran 10 (bullseye)" in text
    assert "estimates are a guess" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    wide = _frame(160)  # a wide terminal keeps the line in its column
    assert "manywheel_3.9_cpu" in wide
    assert len([x for x in wide.splitlines() if x.strip()]) == 3  # headline, header, one row
