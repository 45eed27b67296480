"""The test of a limited-API build (nightly.core.limited): its one wheel, checked to be an
abi3 wheel, then smoke-tested on each Python of `build.tests_on` in turn, each in a fresh
environment with that Python (cibuildwheel's "build once, test on each"). Every Python is
tested even when one fails; the results are PythonTest records (nightly.workspace.pythontests).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from nightly.builds.run.jobs import interpreter_env
from nightly.config import Config
from nightly.core.axes import python_abi
from nightly.core.matrix import Build
from nightly.executors.base import Job, OutputSink
from nightly.workspace.pythontests import FAILED, NOT_RUN, PASSED, PythonTest


class Outcome(Protocol):
    @property
    def ok(self) -> bool: ...

    @property
    def reason(self) -> str | None: ...


class Scripted(Protocol):
    """One run of a smoke script (SmokeTester._scripted)."""

    def __call__(self, kind: str, build: Build, files: list[Path], job: Job, out: OutputSink,
                 cancel: threading.Event) -> Outcome: ...


@dataclass(frozen=True, kw_only=True)
class EachResult:
    ok: bool
    reason: str | None
    tests: tuple[PythonTest, ...]


def not_abi3(build: Build, wheels: list[Path]) -> str | None:
    """Why this limited-API build's wheels cannot serve every Python of its range (a wheel
    tagged for one Python), or None."""
    for wheel in wheels:
        try:
            _, _, _, tags = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename as e:
            return f"{wheel.name} is not a wheel's file name ({e})"
        abis = {t.abi for t in tags}
        if "abi3" in abis or abis == {"none"}:
            continue
        tag = sorted(f"{t.interpreter}-{t.abi}" for t in tags)[0]
        return (f"[project] limited_api = \"{build.limited_api}\", but {wheel.name} is tagged "
                f"{tag}, not abi3: it installs on Python {build.python} alone. Declare the "
                f"wheel abi3 (setup.cfg [bdist_wheel] py_limited_api = {build.limited_api}, "
                "[tool.scikit-build] wheel.py-api, [tool.meson-python] limited-api) or remove "
                "limited_api")
    return None


def job_for(config: Config, build: Build, job: Job, python: str) -> tuple[Build, Job]:
    """The build and job as the test on `python` sees them: DESIRED_PYTHON, the ABI and the
    interpreter of that Python (the image's, where nightly knows it; the local executor
    finds the host's from job.python)."""
    b = replace(build, python=python)
    env = {k: v for k, v in job.env.items() if k != "PYTHON"}
    env.update(DESIRED_PYTHON=python, NIGHTLY_PYTHON_ABI=python_abi(python),
               NIGHTLY_FREE_THREADED="0")
    env.update(interpreter_env(config, b, "container" if job.image else "local"))
    return b, replace(job, python=python, env=env)


def run_each(scripted: Scripted, config: Config, build: Build, wheels: list[Path], job: Job,
              out: OutputSink, cancel: threading.Event) -> EachResult:
    """The wheels of a limited-API build tested on each of its Pythons."""
    problem = not_abi3(build, wheels)
    if problem:
        out(f"smoke: {problem}\n".encode())
        return EachResult(ok=False, reason=f"smoke test: {problem}", tests=())
    tests: list[PythonTest] = []
    for python in build.tests_on:
        if cancel.is_set():
            tests.append(PythonTest(python=python, result=NOT_RUN, reason="interrupted"))
            continue
        out(f"smoke: the {build.limited_api}-abi3 wheel on Python {python} "
            f"({len(tests) + 1} of {len(build.tests_on)})\n".encode())
        started = time.time()
        b, j = job_for(config, build, job, python)
        r = scripted("wheel", b, wheels, j, out, cancel)
        why = (r.reason or "failed").removeprefix("smoke test: ") if not r.ok else None
        tests.append(PythonTest(python=python, result=PASSED if r.ok else FAILED,
                                seconds=round(time.time() - started, 3), reason=why))
    bad = [t for t in tests if t.result != PASSED]
    out((f"smoke: {build.limited_api}-abi3 wheel: "
         + ", ".join(f"{t.python} {t.result}" for t in tests) + "\n").encode())
    if not bad:
        return EachResult(ok=True, reason=None, tests=tuple(tests))
    reason = "smoke test: " + "; ".join(f"on Python {t.python}: {t.reason}" for t in bad)
    return EachResult(ok=False, reason=reason, tests=tuple(tests))


__all__ = ["EachResult", "job_for", "not_abi3", "run_each"]
