"""`nightly` under strace, to stop or kill it at an exact system call (a rename, an unlink, a
flock) instead of hoping a poll lands in a window of microseconds."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.cli import child_env, nightly_cmd

STRACE = shutil.which("strace")


@dataclass
class Traced:
    """`nightly ARGS` under `strace -f`, with system-call tampering (`inject=`)."""

    proc: subprocess.Popen[bytes]
    out_path: Path
    err_path: Path
    _files: list[Any] = field(default_factory=list)

    _pid: int = 0

    @property
    def nightly_pid(self) -> int:
        """The traced `nightly` process: strace's child, once it runs `nightly`."""
        if self._pid:
            return self._pid
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for task in Path(f"/proc/{self.proc.pid}/task").glob("*"):
                try:
                    children = (task / "children").read_text().split()
                except OSError:
                    continue
                for child in children:
                    try:
                        cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                    except OSError:
                        continue
                    # strace's own forks (probes, the child before it execs) carry strace's
                    # command line, which names nightly too.
                    if b"nightly" in cmdline and not cmdline.split(b"\0")[0].endswith(b"strace"):
                        self._pid = int(child)
                        return self._pid
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        raise AssertionError("strace started no nightly process")

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL to nightly itself (what the OOM killer or `kill -9` does), then to strace,
        which would otherwise sit out the delay it injected before letting the corpse go."""
        os.kill(self.nightly_pid, signal.SIGKILL)
        self.proc.kill()

    def wait(self, timeout: float = 60) -> tuple[str, str]:
        self.proc.wait(timeout=timeout)
        for f in self._files:
            f.close()
        return self.out_path.read_text(), self.err_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in self._files:
            f.close()


def start_traced(
    args: Sequence[str],
    strace_args: Sequence[str],
    tmp: Path,
    *,
    env: Mapping[str, str] | None = None,
    seccomp: bool = True,
) -> Traced:
    """`seccomp`: stop only at the traced calls (much faster). strace 6.1 then ignores a
    `signal=` injection filtered by -P, so a kernel kill needs seccomp=False."""
    assert STRACE, "strace is needed for the exact kill points (apt-get install strace)"
    n = len(list(tmp.glob("traced-*.out")))
    out_path, err_path = tmp / f"traced-{n}.out", tmp / f"traced-{n}.err"
    out, err = out_path.open("w"), err_path.open("w")
    cmd = [STRACE, "-f", "-qq", *(["--seccomp-bpf"] if seccomp else []), "-o", "/dev/null", *strace_args,
           *nightly_cmd(), *args]  # fmt: skip
    proc = subprocess.Popen(cmd, env=child_env(env), stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    return Traced(proc, out_path, err_path, [out, err])

