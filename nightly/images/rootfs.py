"""The base layer's root filesystem: a Debian suite bootstrapped with debootstrap, cached.

The rootfs is keyed by the base layer's hash (suite + packages), made in a `.partial` folder
and renamed only once debootstrap finished, so an interrupted run never leaves a rootfs that
looks complete; downloaded .debs are kept in a shared debootstrap cache folder.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from nightly import procs
from nightly.errors import NightlyError
from nightly.images import debootstrap

Log = Callable[[str], None]

MARKER = ".nightly-rootfs-complete"

# What every builder image needs whatever its spec says: nightly's own scripts (bash, the
# tool environment's python3 and venv), TLS roots for pip, patchelf to relocate copied
# interpreters.
ESSENTIAL = ("bash", "ca-certificates", "patchelf", "python3", "python3-venv")


class RootfsError(NightlyError):
    """debootstrap failed or is not available."""


def remove_rootfs(path: Path) -> None:
    """Remove a rootfs, first unmounting what an interrupted debootstrap left mounted in it
    (proc, sys), so the removal never walks into the host's pseudo-filesystems."""
    if not path.exists():
        return
    prefix = str(path.resolve()) + "/"
    try:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        mounts = []
    for mnt in sorted((m for m in mounts if m.startswith(prefix)), reverse=True):
        procs.call(["umount", "-l", mnt])
    procs.call(["rm", "-rf", "--one-file-system", str(path)])


def bootstrap(*, suite: str, packages: tuple[str, ...], key: str, mirror: str, cache: Path,
              log: Log, essential: tuple[str, ...] = ESSENTIAL) -> Path:
    """The rootfs folder for (suite, packages), debootstrapping it when not cached
    (`essential`: what goes in whatever the packages; a runtime image's is smaller)."""
    rootfs = cache / "rootfs" / f"{suite}-{key}"
    if (rootfs / MARKER).exists():
        log(f"base: rootfs cached in {rootfs}")
        return rootfs
    if shutil.which("debootstrap") is None:
        raise RootfsError(
            "debootstrap is not installed: run scripts/container-engine.sh (it installs it) "
            "or apt-get install debootstrap"
        )
    partial = rootfs.with_name(rootfs.name + ".partial")
    remove_rootfs(partial)
    remove_rootfs(rootfs)
    partial.parent.mkdir(parents=True, exist_ok=True)
    debs = cache / "debootstrap-debs"
    debs.mkdir(parents=True, exist_ok=True)
    include = ",".join(sorted(set(essential) | set(packages)))
    log(f"base: debootstrap {suite} minbase from {mirror} (a few minutes cold); "
        f"packages: {include}")
    logfile = cache / "logs" / f"debootstrap-{suite}-{key}.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    logfile.write_bytes(b"")
    code = debootstrap.run(["debootstrap", "--variant=minbase", f"--include={include}",
                            f"--cache-dir={debs}", suite, str(partial), mirror],
                           logfile, f"base: debootstrap {suite}", log)  # packages done of the total
    if code != 0:
        tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-20:])
        remove_rootfs(partial)
        raise RootfsError(f"debootstrap failed (exit {code}; log {logfile}):\n{tail}")
    # apt's caches are not needed to build; a smaller layer is faster to import and store.
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "tmp/*"):
        for p in partial.glob(pattern):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
    (partial / "tmp").chmod(0o1777)
    (partial / MARKER).write_text(f"{suite} {key}\n")
    partial.rename(rootfs)
    log(f"base: rootfs ready in {rootfs}")
    return rootfs


def tar_rootfs(rootfs: Path, dest: Path) -> Path:
    """An uncompressed tar of the rootfs for the engine's image import (GNU tar keeps device
    nodes, hard links and permissions exactly)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    proc = procs.call(
        ["tar", "--numeric-owner", "--one-file-system", f"--exclude=./{MARKER}",
         "-C", str(rootfs), "-cf", str(dest), "."],
    )
    if proc.returncode != 0:
        dest.unlink(missing_ok=True)
        raise RootfsError(f"tar of {rootfs} failed: {proc.stderr.strip()}")
    return dest
