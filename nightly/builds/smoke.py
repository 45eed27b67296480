"""Smoke tests: each package of a succeeded build is tested in a fresh environment before
the build counts as succeeded (and so before anything is uploaded).

Wheels and libtorch zips are tested through the build's own executor (a fresh venv on the
host, or a fresh container from the test image) with the scripts in `smoke_scripts/`; conda
packages are installed from a temporary local channel with a conda client (py-rattler: the
`CondaClient` the night injects, nightly.publish.conda) and imported with the build's
interpreter.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from nightly.builds.buildlog import ErrorLine
from nightly.config import Config
from nightly.executors.base import Executor, Job, OutputSink
from nightly.executors.local import NotFound, find_python
from nightly.plan.matrix import Build, python_number

SCRIPTS = Path(__file__).with_name("smoke_scripts")


class CondaClient(Protocol):
    """What the smoke test needs of a conda client (nightly.publish.conda is one)."""

    def publish_to_channel(self, channel: Path, files: Sequence[Path]) -> list[str]: ...

    def install_from_channel(self, channel: Path, spec: str, prefix: Path) -> list[str]: ...


@dataclass(frozen=True, kw_only=True)
class SmokeResult:
    ok: bool
    reason: str | None = None  # "smoke test: ..." when it failed
    notes: tuple[str, ...] = ()  # e.g. "GPU check not run"


class SmokeTester:
    def __init__(
        self,
        config: Config,
        executor: Executor,
        source_dir: Path,
        *,
        conda: CondaClient | None = None,
    ) -> None:
        self.config = config
        self.executor = executor
        self.source_dir = source_dir
        self.conda = conda

    def __call__(
        self, build: Build, files: list[Path], job: Job, out: OutputSink, cancel: threading.Event
    ) -> SmokeResult:
        """Test the packages `files` of `build` (its job given for environment/paths)."""
        sm = self.config.smoke
        out(b"\n" + b"-" * 30 + b" smoke test " + b"-" * 36 + b"\n")
        wheels = [f for f in files if f.name.endswith(".whl")]
        zips = [f for f in files if f.name.endswith(".zip") and build.package == "libtorch"]
        condas = [f for f in files if f.name.endswith((".conda", ".tar.bz2"))]
        notes: list[str] = []
        if wheels:
            r = self._scripted("wheel", build, wheels, job, out, cancel)
            if not r.ok:
                return r
            if build.is_cuda and sm.gpu_check and not sm.gpu:
                notes.append("GPU check not run (no GPU runtime configured)")
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
        return SmokeResult(ok=True, notes=tuple(notes))

    def _scripted(
        self,
        kind: str,
        build: Build,
        files: list[Path],
        job: Job,
        out: OutputSink,
        cancel: threading.Event,
    ) -> SmokeResult:
        sm = self.config.smoke
        with tempfile.TemporaryDirectory(prefix=f"smoke-{build.id}-", dir=job.work_dir.parent) as t:
            tmp = Path(t)
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
                SMOKE_GPU="1" if sm.gpu else "0",
                SMOKE_COMMAND=sm.command,
                SMOKE_LIBS=" ".join(sm.libtorch_libs),
            )
            smoke_job = replace(
                job,
                # The scripts are laid out like recipes: <dir>/<package>/build.sh.
                package=kind,
                recipes_dir=SCRIPTS,
                source_dir=inputs,
                output_dir=tmp / "out",
                work_dir=tmp / "work",
                env=env,
                timeout_s=sm.timeout_s,
                image=(sm.image or job.image),
                gpu=sm.gpu,
                cache=None,  # a smoke test tests the package, it compiles nothing to keep
            )
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
                               "conda package with (install nightly's conda extra)")
        with tempfile.TemporaryDirectory(prefix=f"smoke-{build.id}-", dir=job.work_dir.parent) as t:
            channel, prefix = Path(t) / "channel", Path(t) / "prefix"
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
                py = find_python(build.python, self.config.local.pythons)
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
            proc = subprocess.run(
                [py, "-c", code, self.config.smoke.import_name, job.env["BUILD_VERSION"], strategy],
                cwd=t, env=env, capture_output=True, timeout=self.config.smoke.timeout_s,
            )
            out(proc.stdout + proc.stderr)
            if proc.returncode != 0:
                return SmokeResult(ok=False, reason="smoke test: the conda package does not import")
            if build.python != "3" and f"python{python_number(build.python)}" not in str(site[0]):
                out(f"smoke: note: site-packages is {site[0]}\n".encode())
        return SmokeResult(ok=True)


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
