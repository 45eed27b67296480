"""The log header names the toolkit of the image a build ran in (issue 16)."""

from __future__ import annotations

from pathlib import Path

from nightly.builds.run import buildlog
from nightly.executors.base import Job


def _job() -> Job:
    here = Path(".")
    return Job(build_id="manywheel_3.12_cu118", package="manywheel", python="3.12", cuda="cu118",
               env={}, recipes_dir=here, source_dir=here, output_dir=here, work_dir=here,
               timeout_s=60.0, image="nightly-builder:cu118-abc")


def test_the_header_names_the_images_nvcc_when_the_executor_knows_it() -> None:
    release = "Cuda compilation tools, release 11.8, V11.8.89"
    desc = {"image": "nightly-builder:cu118-abc", "command": ["true"], "env": {}, "toolkit": release}
    text = buildlog.header(_job(), desc, attempt=1, queue=0, started=0.0, machine="m", executor="container")
    head = text.split("environment:")[0]
    assert f"toolkit:  {release}" in head
    assert "where:    nightly-builder:cu118-abc" in head


def test_no_toolkit_line_without_one() -> None:
    desc = {"image": "nightly-builder:cpu-abc", "command": ["true"], "env": {}}
    text = buildlog.header(_job(), desc, attempt=1, queue=0, started=0.0, machine="m", executor="container")
    assert "toolkit:" not in text


def test_error_line_is_the_last_error_line_across_chunks_else_the_last_line() -> None:
    from nightly.builds.run.buildlog import ErrorLine

    seen = ErrorLine()
    # Chunks cut mid-line, colour codes, a later non-error line: the ERROR line wins.
    for chunk in (b"[manywheel] building\n[manywheel] ERR", b"OR: first\n",
                  b"\x1b[31m[manywheel] ERROR: the wheel has version 1.0\x1b[0m\r\n",
                  b"cleanup done\n", b"  \n"):
        seen.feed(chunk)
    assert seen.line() == "[manywheel] ERROR: the wheel has version 1.0"
    plain = ErrorLine()
    plain.feed(b"one\ntwo, no newline at the end")
    assert plain.line() == "two, no newline at the end"
    assert ErrorLine().line() == ""
    long = ErrorLine()
    long.feed(b"ERROR: " + b"x" * 1000 + b"\n")
    assert len(long.line()) == ErrorLine.MAX
    assert long.line().endswith("...")


def test_pypa_builds_frame_is_not_taken_for_the_cause() -> None:
    """pypa/build, the front end of a filled build environment, ends a failed build with its
    own `ERROR Backend subprocess exited ...` line: the compiler's error is the cause."""
    from nightly.builds.run.buildlog import ErrorLine

    seen = ErrorLine()
    seen.feed(b"* Building wheel...\n"
              b"csrc/alpha.c:3:10: fatal error: units.h: No such file or directory\n"
              b"compilation terminated.\n"
              b"ERROR Backend subprocess exited when trying to invoke build_wheel\n"
              b"[manywheel] ERROR: building the wheel failed (pypa/build, output above)\n")
    assert seen.line() == ("[manywheel] ERROR: building the wheel failed (pypa/build): "
                           "csrc/alpha.c:3:10: fatal error: units.h: No such file or directory")


def test_an_error_pointing_at_the_output_above_carries_the_failing_steps_own_lines() -> None:
    """Issue 57: the table said `building the wheel failed (pip wheel ..., output above)`;
    the reason now carries the CMake error that the person would otherwise look for."""
    from nightly.builds.run.buildlog import ErrorLine

    seen = ErrorLine()
    seen.feed(b"-- The C compiler identification is GNU 10.2.1\n"
              b"CMake Error at CMakeLists.txt:2 (project):\n"
              b"  No CMAKE_Fortran_COMPILER could be found.\n\n"
              b"  Tell CMake where to find the compiler by setting either the environment\n"
              b"-- Configuring incomplete, errors occurred!\n"
              b"*** CMake configuration failed\n"
              b"  error: subprocess-exited-with-error\n"
              b"ERROR: Failed building wheel for flsolve\n"
              b"[manywheel] ERROR: building the wheel failed (pip wheel, output above)\n")
    line = seen.line()
    assert line.startswith("[manywheel] ERROR: building the wheel failed (pip wheel): ")
    assert ("CMake Error at CMakeLists.txt:2 (project): No CMAKE_Fortran_COMPILER could be "
            "found.") in line
    assert "output above" not in line
    assert "subprocess-exited-with-error" not in line
    # An ERROR line that says its cause itself is kept as it is.
    own = ErrorLine()
    own.feed(b"gcc: error: x.c: no such file\n[manywheel] ERROR: the wheel has version 1.0\n")
    assert own.line() == "[manywheel] ERROR: the wheel has version 1.0"


def test_without_an_error_like_line_the_steps_last_line_stands_for_the_output_above() -> None:
    from nightly.builds.run.buildlog import ErrorLine

    seen = ErrorLine()
    seen.feed(b"Usage:\n  pip wheel [options] <requirement specifier> ...\n\n"
              b"no such option: --config-settings\n"
              b"[manywheel] ERROR: building the wheel failed (pip wheel, output above)\n")
    assert seen.line() == ("[manywheel] ERROR: building the wheel failed (pip wheel): "
                           "no such option: --config-settings")


def test_another_tools_error_line_is_a_cause_of_the_recipes() -> None:
    """meson's own `ERROR:` line (scikit-misc's version script, git missing) is the cause;
    pip's frame after it ("finished with status 'error'") is not."""
    from nightly.builds.run.buildlog import ErrorLine

    seen = ErrorLine()
    seen.feed(b"  ../src/meson.build:5:11: ERROR: Command `version_please.py` failed with "
              b"status 1.\n"
              b"  A full log can be found at /w/meson-log.txt\n"
              b"  Preparing metadata (pyproject.toml): finished with status 'error'\n"
              b"error: metadata-generation-failed\n"
              b"[manywheel] ERROR: building the wheel failed (pip wheel, output above)\n")
    assert seen.line() == (
        "[manywheel] ERROR: building the wheel failed (pip wheel): ../src/meson.build:5:11: "
        "ERROR: Command `version_please.py` failed with status 1.")
