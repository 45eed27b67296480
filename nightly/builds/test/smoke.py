"""Smoke tests: each package of a succeeded build is tested in a fresh environment before
the build counts as succeeded (and so before anything is uploaded).

Wheels and libtorch zips are tested through the build's own executor (a fresh venv on the
host, or a fresh container: wheels in the builder's runtime image, nightly.images.runtime)
with the scripts in `smoke_scripts/`; conda
packages are installed from a temporary local channel with a conda client (py-rattler:
nightly.channels.conda, which `night_smoke` gives every build of a night) and imported with
the build's interpreter.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import threading
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from nightly import procs
from nightly.builds.area import userarea
from nightly.builds.area.ownership import owned_names
from nightly.builds.run.buildlog import ErrorLine
from nightly.builds.test import abi3test
from nightly.channels import conda as conda_client
from nightly.config import Config
from nightly.core.matrix import Build, python_number
from nightly.executors import box
from nightly.executors.base import Executor, Job, OutputSink
from nightly.executors.handover import give_to
from nightly.executors.local import NotFound, find_python
from nightly.files import scratch_folder
from nightly.hardening import BuildUser
from nightly.images import runtime
from nightly.workspace.pythontests import PythonTest
from nightly.workspace.records import TestPart, TestRecord

SCRIPTS = Path(__file__).with_name("smoke_scripts")


class CondaClient(Protocol):
    """What the smoke test needs of a conda client (nightly.channels.conda is one)."""

    def publish_to_channel(self, channel: Path, files: Sequence[Path]) -> list[str]: ...

    def install_from_channel(self, channel: Path, spec: str, prefix: Path) -> list[str]: ...


PASSED, FAILED, NOT_RUN = "passed", "failed", "not run"


@dataclass(frozen=True, kw_only=True)
class SmokeResult:
    ok: bool
    reason: str | None = None  # "smoke test: ..." when it failed
    notes: tuple[str, ...] = ()  # e.g. "GPU check not run"
    # state.json's `tested`: the overall result and each part's (result, where, when, seconds)
    tested: TestRecord | None = None
    pythons: tuple[PythonTest, ...] = ()  # a limited-API build's test on each Python


def stage_part(result: str, where: str, started: float, *, attempts: int = 1,
              reason: str | None = None) -> TestPart:
    """One part of a build's test (cpu or gpu), as state.json's `tested` records it."""
    return TestPart(result=result, where=where,
                    when=dt.datetime.fromtimestamp(started).astimezone()
                    .isoformat(timespec="seconds"),
                    seconds=round(time.time() - started, 3) if result != NOT_RUN else 0.0,
                    attempts=attempts if result != NOT_RUN else None, reason=reason or None)


def needs_gpu_part(config: Config, build: Build, names: Sequence[str]) -> bool:
    """Whether a build's test has a GPU part: a CUDA build with wheels, and a GPU check or
    command configured."""
    sm = config.smoke
    return (build.is_cuda and any(n.endswith(".whl") for n in names)
            and bool(sm.gpu_check or sm.gpu_command))


def preflight_jobs(config: Config, build: Build, job: Job, kind: str = "wheel") -> list[Job]:
    """What a container preflight looks at for this build: its own job and, when its tests
    (`kind`: wheel, gputest) run in another image (the builder's runtime image, `[smoke]
    image`), a job naming that image, so a host that lacks it refuses before the work starts
    instead of failing a good package's test with "image not found"."""
    if not job.image or not config.smoke.enabled or build.package not in runtime.WHEEL_PACKAGES:
        return [job]
    image, _ = runtime.smoke_image(config, build, job.image, kind)
    if image == job.image:
        return [job]
    return [job, replace(job, build_id=f"{job.build_id} (its tests)", image=image)]


def tested_record(cpu: TestPart, gpu: TestPart | None,
                  pythons: tuple[PythonTest, ...]) -> TestRecord:
    """The build's `tested`: failed if a part failed; not run if the GPU part (required) was
    not run; else passed. A limited-API build's CPU part lists each Python's result."""
    return TestRecord.of(cpu, gpu, pythons)


def night_smoke(config: Config, executor: Executor, source_dir: Path, *, where: str = "",
                gpu_host: bool = False, gpu_stage: bool = False) -> SmokeTester | None:
    """The smoke test of a night's builds when `[smoke] enabled` (else None), conda packages
    through nightly.channels.conda: the local phase, a cluster worker and bisect's steps."""
    if not config.smoke.enabled:
        return None
    return SmokeTester(config, executor, source_dir, conda=conda_client, where=where,
                       gpu_host=gpu_host, gpu_stage=gpu_stage)


class SmokeTester:
    def __init__(
        self,
        config: Config,
        executor: Executor,
        source_dir: Path,
        *,
        conda: CondaClient | None = None,
        where: str = "",
        gpu_host: bool = False,
        gpu_stage: bool = False,
    ) -> None:
        self.config = config
        self.executor = executor
        self.source_dir = source_dir
        self.conda = conda
        self.where = where  # the machine (or worker) the CPU part runs on
        # The GPU part runs here: a machine with gpu = true, or [smoke] gpu.
        self.gpu_host = gpu_host or config.smoke.gpu
        # The GPU part is a task of its own ([cluster] gpu_smoke: nightly.cluster.gputest),
        # run on a GPU worker after this build: only the CPU part runs here.
        self.gpu_stage = gpu_stage

    def __call__(
        self, build: Build, files: list[Path], job: Job, out: OutputSink, cancel: threading.Event
    ) -> SmokeResult:
        """Test the packages `files` of `build` (its job given for environment/paths): the
        CPU part here, then the GPU part of CUDA wheels where a GPU is (else "not run")."""
        started = time.time()
        cpu = self._cpu_part(build, files, job, out, cancel)
        cpu_part = stage_part(PASSED if cpu.ok else FAILED, self.where, started, reason=cpu.reason)
        wheels = [f for f in files if f.name.endswith(".whl")]
        if not cpu.ok or not needs_gpu_part(self.config, build, [f.name for f in wheels]):
            return replace(cpu, tested=tested_record(cpu_part, None, cpu.pythons))
        if self.gpu_stage:
            out(b"smoke: the GPU part runs as a task of its own on a worker with the gpu "
                b"resource ([cluster] gpu_smoke); its log follows this build's\n")
            return replace(cpu, tested=tested_record(cpu_part, None, cpu.pythons))
        gpu, gpu_part = self.gpu_part(build, wheels, job, out, cancel)
        return SmokeResult(ok=gpu.ok, reason=gpu.reason, notes=cpu.notes + gpu.notes,
                           tested=tested_record(cpu_part, gpu_part, cpu.pythons),
                           pythons=cpu.pythons)

    def gpu_part(
        self, build: Build, wheels: list[Path], job: Job, out: OutputSink, cancel: threading.Event
    ) -> tuple[SmokeResult, TestPart]:
        """The GPU part of a CUDA build's test: its own log section, timeout and retries. Not
        run (recorded so) on a host without a GPU; a failure under [smoke] require_gpu."""
        sm = self.config.smoke
        started = time.time()
        out(b"\n" + b"-" * 30 + b" GPU test " + b"-" * 38 + b"\n")
        if not self.gpu_host:
            why = "GPU part not run (no GPU on this host: [[machines]] gpu = true, or a cluster " \
                  "worker with the gpu resource)"
            out(f"gpu test: NOT RUN: {why}\n".encode())
            if sm.require_gpu:
                return (SmokeResult(ok=False, reason=f"smoke test: {why}; [smoke] require_gpu "
                                    "= true"), stage_part(NOT_RUN, "", started, reason=why))
            return SmokeResult(ok=True, notes=(why,)), stage_part(NOT_RUN, "", started, reason=why)
        attempt, r = 0, SmokeResult(ok=False)
        while attempt <= sm.gpu_retries and not cancel.is_set():
            attempt += 1
            out(f"gpu test: attempt {attempt} of {sm.gpu_retries + 1} on {self.where}\n".encode())
            r = self._scripted("gputest", build, wheels, job, out, cancel,
                               timeout_s=sm.gpu_timeout_s, gpu=True)
            if r.ok:
                break
        reason = None if r.ok else (r.reason or "smoke test").replace("smoke test:", "GPU test:", 1)
        part = stage_part(PASSED if r.ok else FAILED, self.where, started, attempts=attempt,
                         reason=reason)
        return SmokeResult(ok=r.ok, reason=reason), part

    def _cpu_part(
        self, build: Build, files: list[Path], job: Job, out: OutputSink, cancel: threading.Event
    ) -> SmokeResult:
        sm = self.config.smoke
        out(b"\n" + b"-" * 30 + b" smoke test " + b"-" * 36 + b"\n")
        wheels = [f for f in files if f.name.endswith(".whl")]
        zips = [f for f in files if f.name.endswith(".zip") and build.package == "libtorch"]
        condas = [f for f in files if f.name.endswith((".conda", ".tar.bz2"))]
        notes: list[str] = []
        pythons: tuple[PythonTest, ...] = ()
        if wheels and build.tests_on:  # a limited-API build: its wheel on each Python
            each = abi3test.run_each(self._scripted, self.config, build, wheels, job, out,
                                      cancel)
            if not each.ok:
                return SmokeResult(ok=False, reason=each.reason, pythons=each.tests)
            pythons = each.tests
        elif wheels:
            r = self._scripted("wheel", build, wheels, job, out, cancel)
            if not r.ok:
                return r
        if zips:
            if not sm.libtorch_program:
                out(b"smoke: libtorch zips: no smoke.libtorch_program configured; "
                    b"checked only that each holds include/ and lib/\n")
                r = _check_zip_layout(zips, out)
            else:
                r = self._scripted("libtorch", build, zips, job, out, cancel)
            if not r.ok:
                return r
        if condas:
            r = self._conda(build, condas, job, out)
            if not r.ok:
                return r
        if not (wheels or zips or condas):
            out(b"smoke: no package type this smoke test knows; nothing tested\n")
        return SmokeResult(ok=True, notes=tuple(notes), pythons=pythons)

    def _scripted(
        self,
        kind: str,
        build: Build,
        files: list[Path],
        job: Job,
        out: OutputSink,
        cancel: threading.Event,
        *,
        timeout_s: float | None = None,
        gpu: bool = False,
    ) -> SmokeResult:
        sm = self.config.smoke
        # Wheels in the builder's runtime image (no compilers, no -dev packages), unless
        # [smoke] image says otherwise (nightly.images.runtime).
        image, image_note = (runtime.smoke_image(self.config, build, job.image, kind)
                             if job.image else (None, ""))
        with scratch_folder(f"smoke-{build.id}-", job.work_dir.parent) as tmp:
            inputs = tmp / "inputs"
            inputs.mkdir()
            for f in files:
                shutil.copy2(f, inputs / f.name)
            if kind == "libtorch":
                shutil.copy2(self.source_dir / sm.libtorch_program, inputs / "program.cpp")
            env = dict(job.env)
            env.update(
                SMOKE_IMPORT=sm.import_name,
                EXPECT_VERSION=env.get("PACKAGE_VERSION") or env["BUILD_VERSION"],
                SMOKE_CUDA_CHECK=sm.cuda_check,
                SMOKE_GPU_CHECK=sm.gpu_check,
                SMOKE_GPU_COMMAND=sm.gpu_command,
                SMOKE_COMMAND=sm.command,
                SMOKE_LIBS=" ".join(sm.libtorch_libs),
                SMOKE_DEPENDENCIES=sm.dependencies,
                SMOKE_NOT_FROM_INDEX=" ".join(not_from_index(self.config, files)),
            )
            _smoke_indexes(self.config, env)
            smoke_job = replace(
                job,
                # The scripts are laid out like recipes: <dir>/<package>/build.sh.
                package=kind,
                recipes_dir=_scripts(job),
                source_dir=inputs,
                output_dir=tmp / "out",
                work_dir=tmp / "work",
                env=env,
                timeout_s=timeout_s or sm.timeout_s,
                image=image,
                gpu=gpu,
                cache=None,  # a smoke test tests the package, it compiles nothing to keep
            )
            if job.image:  # the container executor: say which image, and why that one
                who = "gpu test" if kind == "gputest" else "smoke"
                out(f"{who}: {image_note}\n".encode())
            smoke_job.output_dir.mkdir()
            smoke_job.work_dir.mkdir()
            errors = ErrorLine()

            def watched(chunk: bytes) -> None:
                out(chunk)
                errors.feed(chunk)

            result = self.executor.run(smoke_job, watched, cancel)
        if result.exit_status == 0 and result.reason is None:
            return SmokeResult(ok=True)
        # The script's last line says what it found wrong.
        line = errors.line()
        why = result.reason or f"exit status {result.exit_status}" + (f": {line}" if line else "")
        return SmokeResult(ok=False, reason=f"smoke test: {why}")

    def _conda(self, build: Build, files: list[Path], job: Job, out: OutputSink) -> SmokeResult:
        """Install from a temporary local channel with py-rattler, then import with the
        build's interpreter (conda packages here carry no interpreter of their own)."""
        conda = self.conda
        if conda is None:
            return SmokeResult(ok=False, reason="smoke test: no conda client to install the "
                               "conda package with (pip install 'nightly-builds[conda]')")
        with scratch_folder(f"smoke-{build.id}-", job.work_dir.parent) as tmp:
            channel, prefix = tmp / "channel", tmp / "prefix"
            try:
                conda.publish_to_channel(channel, files)
                name = _conda_name(files[0])
                installed = conda.install_from_channel(channel, name, prefix)
            except Exception as e:  # any client failure is this package's failure
                out(f"smoke: conda install failed: {e}\n".encode())
                return SmokeResult(ok=False, reason=f"smoke test: conda install failed: {e}")
            out(f"smoke: installed {', '.join(installed)} into a fresh prefix with py-rattler\n"
                .encode())
            site = sorted(prefix.glob("lib/python*/site-packages")) + sorted(
                prefix.glob("lib/site-packages")
            )
            if not site:
                out(b"smoke: the conda package holds no Python modules; install checked only\n")
                return SmokeResult(ok=True)
            try:
                py = find_python(build.python, self.config.local.pythons,
                                 getattr(self.executor, "usable", None))
            except NotFound as e:
                return SmokeResult(ok=False, reason=f"smoke test: {e}")
            code = (
                "import importlib, sys; m = importlib.import_module(sys.argv[1]); "
                "v = getattr(m, '__version__', None); print('smoke: imported', m.__file__, v); "
                "sys.exit(0 if v in (None, sys.argv[2]) or sys.argv[3] == 'rewrite' "
                "else 'version ' + str(v) + ' != ' + sys.argv[2])"
            )
            # version_from = rewrite: the code's __version__ still says the release.
            strategy = job.env.get("NIGHTLY_VERSION_FROM", "")
            env = {"PYTHONPATH": str(site[0]), "PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"}
            # The package's code runs as the build user when there is one, like its build.
            user: BuildUser | None = getattr(self.executor, "user", None)
            command = [py, "-c", code, self.config.smoke.import_name, job.env["BUILD_VERSION"],
                       strategy]
            if user is not None:  # in a box of its own, as the build's recipe
                (tmp / "work" / "tmp").mkdir(parents=True)
                give_to(tmp, user)
                command = box.helper(replace(job, work_dir=tmp / "work"),
                                     [*user.setpriv(), *command])
            proc = procs.call(command, cwd=tmp, env=env, timeout=self.config.smoke.timeout_s)
            out(proc.stdout_bytes + proc.stderr_bytes)
            if proc.returncode != 0:
                return SmokeResult(ok=False, reason="smoke test: the conda package does not import")
            if build.python != "3" and f"python{python_number(build.python)}" not in str(site[0]):
                out(f"smoke: note: site-packages is {site[0]}\n".encode())
        return SmokeResult(ok=True)


def _scripts(job: Job) -> Path:
    """The smoke scripts: nightly's own, or the build area's copy when the build runs as a
    build user (nightly's may be out of its reach; builds/userarea.py)."""
    staged = job.recipes_dir.parent / userarea.SMOKE_SCRIPTS
    return staged if staged.is_dir() else SCRIPTS


def _smoke_indexes(config: Config, env: dict[str, str]) -> None:
    """pip's indexes for the dependencies of a wheel under test ([smoke] dependencies =
    "index"): [smoke]'s own when it names any (in place of [build]'s), else the job's
    ([build]'s PIP_* settings, else the host's pip configuration)."""
    sm = config.smoke
    if sm.dependencies != "index" or not (sm.index_url or sm.extra_index_urls):
        return
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        env.pop(key, None)
    if sm.index_url:
        env["PIP_INDEX_URL"] = sm.index_url
    if sm.extra_index_urls:
        env["PIP_EXTRA_INDEX_URL"] = " ".join(sm.extra_index_urls)


def not_from_index(config: Config, files: Sequence[Path]) -> list[str]:
    """The project's own names ([project] name, extra_names) that none of this build's
    wheels carries: with [smoke] dependencies = "index", pip is constrained never to take
    them from the dependency index (the wheels' own names come from their files, which pip
    prefers to any index), so no package of the project's name but the night's is installed
    and its code run, for a direct or a transitive dependency alike."""
    built = set()
    for f in files:
        with contextlib.suppress(InvalidWheelFilename):
            built.add(canonicalize_name(parse_wheel_filename(f.name)[0]))
    return sorted(owned_names(config.project.name, config.project.extra_names) - built)


def _conda_name(path: Path) -> str:
    """name-version-build.conda -> name (the last two dash-separated fields are not the name)."""
    stem = path.name.removesuffix(".conda").removesuffix(".tar.bz2")
    return stem.rsplit("-", 2)[0]


def _check_zip_layout(zips: list[Path], out: OutputSink) -> SmokeResult:
    for z in zips:
        try:
            names = zipfile.ZipFile(z).namelist()
        except zipfile.BadZipFile as e:
            return SmokeResult(ok=False, reason=f"smoke test: {z.name} is not a zip ({e})")
        has = {part for n in names for part in n.split("/")[:2]}
        if not {"include", "lib"} <= has:
            return SmokeResult(ok=False, reason=f"smoke test: {z.name} lacks include/ or lib/")
        out(f"smoke: {z.name}: {len(names)} entries with include/ and lib/\n".encode())
    return SmokeResult(ok=True)
