"""Each build alone: a build user's recipe (and its smoke test) runs in a box of its own.

Every build of a build account runs as the same uid, so without more any build could open
another running build's folder (its compiler wrapper, its output), its compiler cache's
socket, or reach its processes through /proc/<pid>/cwd or ptrace. nightly, as root, starts
each such build in new namespaces (util-linux's `unshare`; the model is bubblewrap and
Bazel's linux-sandbox) before it switches to the account:

- a **mount namespace** in which the build area's `nights/` folder (every project's and
  night's builds) is an empty tmpfs, with only what this build reads (its source copy, the
  recipes, the smoke scripts, the wheelhouse: root's, read-only to the account) and its
  own build folder (read-write) mounted back at their usual paths, and likewise the
  area's `zig-cache/` with only the build's own zig cache; `/tmp` is the build's own temporary
  folder (`WORK_DIR/tmp`: the compiler cache server's socket lives there), `/dev/shm` a
  tmpfs of its own;
- a **PID namespace** with its own /proc: the build sees and signals only its own
  processes, so no /proc/<pid>/root or cwd leads into another build, and nothing it
  starts outlives it (the kernel kills the namespace when the recipe ends; the box names
  what was still running first, on a pipe only nightly reads);
- an **IPC namespace** (System V and POSIX message queues of its own).

The network is shared (builds download their dependencies). docs/security.md, "Each build
alone", says what this guarantees and what it does not.
"""

from __future__ import annotations

import functools
import os
import shlex
from pathlib import Path

from nightly import procs
from nightly.executors.base import Job, OutputSink

NIGHTS = "nights"  # the build area's folder of every night's builds (builds/area/userarea.py)
ZIG = "zig-cache"  # the area's zig caches: zig-cache/<project>-<hash>/<build> (the user's)
STAGE = ".box"  # beside them: where a box reaches the real folders while it lays out its view
MAX_LISTED = 50  # processes a box names when its recipe ended (the rest are counted)
UNSHARE = ["unshare", "--mount", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc",
           "--propagation", "private"]

# Runs as root inside the new namespaces, after the lines that lay the folders out: "$@" is
# the command (setpriv ... recipe), {rfd} the report pipe, which the command never holds.
_RUN = r"""
set +e
"$@" {rfd}>&-
rc=$?
# What is still running in the box (bash builtins only: nothing of the box's own is listed),
# then the box ends, and the kernel kills the rest with it.
n=0
for p in /proc/[0-9]*; do
    pid=${{p#/proc/}}
    [ "$pid" = 1 ] && continue
    uid=""
    while read -r key value _; do
        [ "$key" = "Uid:" ] && uid=$value && break
    done < "$p/status" 2>/dev/null || continue
    mapfile -d '' -t argv < "$p/cmdline" 2>/dev/null || continue
    [ "${{#argv[@]}}" -gt 0 ] || continue
    n=$((n + 1))
    [ "$n" -le {max} ] && printf 'pid %s (uid %s): %.300s\n' "$pid" "$uid" "${{argv[*]}}" >&{rfd}
done
[ "$n" -gt {max} ] && printf 'and %s more\n' "$((n - {max}))" >&{rfd}
exit $rc
"""


@functools.cache
def unavailable() -> str | None:
    """None when this process can make boxes; else why not (for the build's log)."""
    if os.geteuid() != 0:
        return f"nightly runs as uid {os.geteuid()}, not root: it cannot make namespaces"
    try:  # ends at once: nothing to wait for
        proc = procs.call([*UNSHARE, "true"])
    except OSError as e:
        return f"util-linux's unshare cannot run: {e}"
    if proc.returncode != 0:
        said = proc.stderr_bytes.decode("utf-8", "replace").strip()[-200:]
        return ("the kernel refused new mount/PID/IPC namespaces "
                f"({said or f'exit status {proc.returncode}'})")
    return None


def nights_of(job: Job) -> Path | None:
    """The area's `nights/` folder that holds this build's folder (None: not in an area)."""
    if job.area is None:
        return None
    nights = job.area / NIGHTS
    return nights if job.work_dir.is_relative_to(nights) else None


def shown(job: Job) -> list[tuple[Path, bool]]:
    """What of the covered folders the build sees: (path, writable); its build folder
    first, then its own zig cache."""
    seen: list[tuple[Path, bool]] = [(job.work_dir.parent, True)]
    if job.env.get("ZIG_GLOBAL_CACHE_DIR"):
        seen.append((Path(job.env["ZIG_GLOBAL_CACHE_DIR"]), True))
    reads = [job.source_dir, job.recipes_dir, job.recipes_dir.parent / ".nightly-smoke-scripts"]
    if job.env.get("NIGHTLY_WHEELHOUSE"):
        reads.append(Path(job.env["NIGHTLY_WHEELHOUSE"]))
    for path in dict.fromkeys(reads):
        if not any(path.is_relative_to(p) for p, _ in seen):
            seen.append((path, False))
    return seen


def own_caches(job: Job, uid: int, gid: int) -> None:
    """The build's own zig cache in the area (zig-cache/<project>-<hash>/<build>): made, the
    build user's (uid, gid), 0700; kept from night to night."""
    zig = Path(job.env.get("ZIG_GLOBAL_CACHE_DIR") or "/")
    if job.area is None or not zig.is_relative_to(job.area / ZIG) or zig == job.area / ZIG:
        return
    zig.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.lstat(zig).st_uid != uid:
        os.chown(zig, uid, gid, follow_symlinks=False)


def _entry(source: str, target: str, fstype: str, options: str) -> str:
    """One line of the box's mount table (fstab(5): blanks and backslashes octal-escaped)."""
    def esc(text: str) -> str:
        return (text.replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011")
                .replace("\n", "\\012"))
    return f"{esc(source)} {esc(target)} {fstype} {options} 0 0"


def _add(*entries: str) -> str:
    """The shell line that appends `entries` to the box's mount table ($tab)."""
    return "printf '%s\\n' " + " ".join(shlex.quote(e) for e in entries) + ' >>"$tab"'


def _cover(top: Path, stage: Path, show: list[tuple[Path, bool]]) -> list[str]:
    """The shell lines that add to the mount table what makes `top` an empty tmpfs with only
    `show`'s paths in it (those that exist), at their places. The real `top` is reachable
    at `stage` (in the box's own stage, root's 0700) while the view is made. What is
    read-only is root's and its modes keep it so (no remount)."""
    q = shlex.quote
    rels = [p.relative_to(top) for p, _ in show if p.is_relative_to(top) and p != top]
    return [_add(_entry(str(top), str(stage), "none", "rbind,X-mount.mkdir=0700"),
                 _entry("nightly-box", str(top), "tmpfs", "mode=0755,size=1m,nosuid,nodev")),
            *(f"[ ! -e {q(str(top / rel))} ] || "
              + _add(_entry(str(stage / rel), str(top / rel), "none", "rbind,X-mount.mkdir"))
              for rel in rels)]


def _mounts(area: Path, show: list[tuple[Path, bool]], tmp: Path) -> str:
    """The shell lines that lay the box out (as root, in the new mount namespace): the
    area's nights/ and zig-cache/ covered but for this build's own. Every mount is a line
    of one mount table that one `mount --all` makes, in order: three processes a box,
    not one per mount (each costs a build 2-4 ms). The table is written in a tmpfs of the
    box's own over the area's .box, never on disk nor seen by another box, and that tmpfs
    (with the real folders staged in it) is gone before the recipe starts."""
    q = shlex.quote
    stage = area / STAGE
    # Made by the night (builds/area/userarea.py); -p: boxes starting at once may both make it.
    lines = ["set -eu", f"[ -d {q(str(stage))} ] || mkdir -p -m 0700 {q(str(stage))}",
             f"mount -t tmpfs -o mode=0700,size=1m,nosuid,nodev nightly-stage {q(str(stage))}",
             f"tab={q(str(stage / 'fstab'))}", ': >"$tab"']
    for top, staged in ((area / NIGHTS, stage / "n"), (area / ZIG, stage / "z")):
        lines += [f"if [ -d {q(str(top))} ]; then", *_cover(top, staged, show), "fi"]
    if not area.is_relative_to("/tmp"):  # a build_dir under /tmp would be hidden by it
        lines.append(_add(_entry(str(tmp), "/tmp", "none", "bind")))
    lines.append(_add(_entry("nightly-shm", "/dev/shm", "tmpfs", "mode=1777,nosuid,nodev")))
    lines += ['mount --all --fstab "$tab"', f"umount -l {q(str(stage))}"]
    return "\n".join(lines)


def wrap(job: Job, command: list[str], report_fd: int | None) -> list[str]:
    """`command` (the recipe as the build user) run in the build's box; what the box names
    as left running when the recipe ended is written to `report_fd` (None: the command
    is the box's first process, and what it leaves is killed unnamed when it ends)."""
    nights = nights_of(job)
    if nights is None:
        return command
    run = ('\nexec "$@"\n' if report_fd is None
           else _RUN.format(rfd=report_fd, max=MAX_LISTED))
    script = _mounts(nights.parent, shown(job), job.work_dir / "tmp") + run
    return [*UNSHARE, "--", "bash", "-c", script, "nightly-box", *command]


def helper(job: Job, command: list[str]) -> list[str]:
    """A build user's `command` that is not a recipe (the conda smoke test's import) in a
    box of `job` when nightly can make one (else as it is: the recipe's log said why)."""
    return command if unavailable() is not None else wrap(job, command, None)


def boxed(job: Job, command: list[str]) -> tuple[list[str], int, int, str | None]:
    """A build user's `command` in its box: (the command, the report pipe's read and write
    ends or -1, the log's line when the build runs without a box)."""
    if nights_of(job) is None:
        return command, -1, -1, None
    why = unavailable()
    if why is not None:
        return command, -1, -1, (
            f"namespaces: {why}; the build runs without a box of its own: the build "
            "account's other running builds can reach its folder (docs/security.md)")
    report_r, report_w = os.pipe()
    return wrap(job, command, report_w), report_r, report_w, None


def left_running(report: int, job: Job, out: OutputSink) -> list[str]:
    """The note naming what the box still held when the recipe ended (the kernel killed it
    with the box); closes `report` (-1: no box)."""
    if report < 0:
        return []
    try:
        left = read_report(report)
    finally:
        os.close(report)
    if not left:
        return []
    note = (f"the recipe of {job.build_id} left {len(left)} process(es) running when it "
            "ended, killed: " + "; ".join(left))
    out(f"[nightly] {note}\n".encode())
    return [note]


def read_report(fd: int) -> list[str]:
    """The lines the box wrote (once its process ended: the pipe holds them all)."""
    data = b""
    os.set_blocking(fd, False)
    try:
        while len(data) < 1 << 16:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            data += chunk
    except BlockingIOError:
        pass
    return [line for line in data.decode("utf-8", "replace").splitlines() if line]


__all__ = ["NIGHTS", "boxed", "helper", "left_running", "nights_of", "own_caches", "read_report", "shown",
           "unavailable", "wrap"]
