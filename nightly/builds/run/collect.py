"""Collecting a finished build into the day folder: the one step both build phases end with.

The local queues (nightly.builds.run.runner) and the Dask orchestrator (nightly.cluster.orchestrator) both
finish a build the same way: its package files are hashed and renamed into
`packages/<package>/<cuda>/`, its log is filed into `logs/succeeded|failed/`, and then (last,
so a kill -9 before it leaves a build that a rerun redoes or adopts) its state.json entry says
how it ended. Only where the files and the log come from differs: the build's own output
folder and running log, or what a worker left in staging.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from nightly.builds.area.ownership import NotOurs, check_owned
from nightly.builds.run import onename
from nightly.builds.run.takeback import Taken
from nightly.core import manylinux
from nightly.core.matrix import Build
from nightly.files import sha256_file
from nightly.workspace import FAILED, SUCCEEDED, BuildEntry, Day, PackageFile, State

# (ok, reason, the filed packages) -> where the build's log now is (in succeeded/ or failed/)
LogFiler = Callable[[bool, "str | None", "list[PackageFile]"], Path]


def file_packages(
    day: Day,
    state: State,
    build: Build,
    files: Sequence[Path | Taken],
    expected: Mapping[str, tuple[int, str]] | None = None,
    owners: frozenset[str] | None = None,
) -> list[PackageFile]:
    """Hash each file that does not carry its sha256 (a `Taken` package does: hashed once as
    it was taken back, and nightly's own since), against the size and sha256 a worker
    reported when `expected` has them (all are checked before any is moved); check that
    each is the project's (when `owners` names its distributions: NotOurs otherwise), make
    it world-readable, and rename it into the day's package folder (same filesystem: atomic,
    never half a package), never over another build's file (nightly.builds.run.onename:
    NameTaken)."""
    checked = [f if isinstance(f, Taken) else _hashed(f, expected) for f in files]
    if owners is not None:
        check_owned([t.path for t in checked], build.package, owners)
    dest_dir = day.package_dir(build.package, build.cuda)
    dest_dir.mkdir(parents=True, exist_ok=True)
    out, placed = [], []
    try:
        for t in checked:
            os.chmod(t.path, 0o644)
            # Never over another build's file: one file name, one set of bytes (onename).
            placed.append(onename.place(day, state, build.id, t.path, dest_dir / t.name,
                                        t.sha256))
            out.append(PackageFile(name=t.name, path=str(placed[-1].dest.relative_to(day.path)),
                                   size=t.size, sha256=t.sha256))
    except BaseException:
        onename.take_back(placed)
        raise
    return out


def _hashed(f: Path, expected: Mapping[str, tuple[int, str]] | None) -> Taken:
    """A file that carries no sha256 (staged by a worker, or adopted), hashed now and held
    to what its worker reported when `expected` names it."""
    digest, size = sha256_file(f), f.stat().st_size
    want = (expected or {}).get(f.name)
    if want is not None and (size, digest) != (int(want[0]), want[1]):
        raise ValueError(f"{f.name}: staging holds {size} bytes sha256 {digest}, the "
                         f"worker reported {want[0]} bytes sha256 {want[1]}")
    return Taken(path=f, sha256=digest, size=size)


def check_policy(
    state: State, build: Build, env: Mapping[str, str], files: Sequence[Path]
) -> manylinux.Verdict:
    """The manylinux check of a finished build's packages, before anything is filed: a
    manywheel must carry a manylinux tag no newer than its policy (NIGHTLY_MANYLINUX of the
    recipe environment), whatever the recipe said; a libtorch zip's glibc is recorded. The
    record (policy, tags reached, glibc needed) goes into the build's state entry."""
    verdict = manylinux.check_packages(build.package, env.get(manylinux.ENV_POLICY, ""), files,
                                       env.get("NIGHTLY_TOOLCHAIN", ""), arch=build.target_arch,
                                       cuda=build.cuda.startswith("cu"))
    if verdict.record is not None:
        # What it was built under, so a later policy or toolchain change rebuilds it
        # (nightly.builds.rules.policy).
        toolchain = env.get("NIGHTLY_MANYLINUX_TOOLCHAIN", "")
        # Written with the build's state entry (collect_build), not on its own.
        state.note(build.id, manylinux=replace(verdict.record, toolchain=toolchain)
                   if toolchain else verdict.record)
    return verdict


def collect_build(
    day: Day,
    state: State,
    build: Build,
    *,
    ok: bool,
    reason: str | None,
    files: Sequence[Path | Taken],
    file_log: LogFiler,
    failed_status: str = FAILED,
    expected: Mapping[str, tuple[int, str]] | None = None,
    uncollected: str = "collecting packages failed",
    infra: bool = False,
    infra_if_uncollected: bool = False,
    owners: frozenset[str] | None = None,
    **fields: object,
) -> BuildEntry:
    """File a finished build: packages (when it succeeded), then its log, then its state
    entry (`fields` are the rest of the entry). A package that cannot be filed fails the build
    with `uncollected: <why>` (one that is not the project's, `owners`: with why). Returns
    the state entry as written."""
    packages: list[PackageFile] = []
    if ok:
        try:
            packages = file_packages(day, state, build, files, expected, owners)
        except (NotOurs, onename.NameTaken) as e:  # the build's own doing, not the infrastructure's
            ok, reason = False, str(e)
        except (OSError, ValueError) as e:
            ok, reason = False, f"{uncollected}: {e}"
            infra = infra or infra_if_uncollected
    try:
        log = file_log(ok, reason, packages)
        fields.setdefault("ended", time.time())
        return state.update(
            build.id,
            status=SUCCEEDED if ok else failed_status,
            reason=reason,
            packages=packages,
            infra=infra,
            log=str(log.relative_to(day.path)),
            **fields,
        )
    finally:  # state.json now says who holds these names
        onename.release([day.path / p.path for p in packages])


__all__ = ["LogFiler", "PackageFile", "check_policy", "collect_build", "file_packages"]
