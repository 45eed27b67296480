"""The `nightly` command run by the tests: in the background or to the end, as a real
process that is not on a terminal, with a secret in its environment that no recipe or file
may ever see; and checks on the processes a night leaves behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SECRET_NAME = "AWS_SECRET_ACCESS_KEY"
SECRET_VALUE = "s3cr3t-value-that-must-never-be-written-9f2c"


def nightly_cmd() -> list[str]:
    """The installed console script beside this interpreter, else `python -m nightly`."""
    script = Path(sys.executable).with_name("nightly")
    return [str(script)] if script.exists() else [sys.executable, "-m", "nightly"]


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment for a `nightly` process: this one, plus a secret that no
    recipe or file may ever see, minus anything that makes output a terminal's."""
    env = {k: v for k, v in os.environ.items() if k not in ("NIGHTLY_CONFIG", "COLUMNS")}
    env[SECRET_NAME] = SECRET_VALUE
    env.update(extra or {})
    return env


def run_nightly(
    args: Sequence[str],
    cwd: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 90,
) -> tuple[int, str, str]:
    """Run `nightly ARGS` as a subprocess (not on a terminal): (exit code, stdout, stderr)."""
    proc = subprocess.run(
        [*nightly_cmd(), *args],
        cwd=cwd,
        env=child_env(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


def run_process(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    command: Sequence[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`nightly ARGS` (or `command` ARGS) with this environment plus `env`, as it is (no
    secret added, the terminal variables kept): the unit tests' real-process runs."""
    return subprocess.run(
        [*(command if command is not None else nightly_cmd()), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=60,
        check=False,
    )


@dataclass
class Started:
    proc: subprocess.Popen[str]
    out_path: Path
    err_path: Path
    _files: list[object] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout: float = 90) -> tuple[int, str, str]:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            # Where it waits: nightly prints every thread's stack on SIGUSR1 (cli/main.py).
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            raise AssertionError(
                f"nightly still running after {timeout:g} s; its stderr, with its threads' "
                f"stacks:\n{self.err_path.read_text()[-20000:]}") from e
        self.close()
        return code, self.out_path.read_text(), self.err_path.read_text()

    def stop(self) -> None:
        """Kill it if it still runs; close its output files."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.close()

    def close(self) -> None:
        for f in self._files:
            f.close()  # type: ignore[attr-defined]


def start_nightly(
    args: Sequence[str],
    out_dir: Path,
    n: int,
    cwd: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> Started:
    """`nightly ARGS` running in the background, its output in out_dir/cli-N.out and .err."""
    out_path, err_path = out_dir / f"cli-{n}.out", out_dir / f"cli-{n}.err"
    out, err = out_path.open("w"), err_path.open("w")
    proc = subprocess.Popen(
        [*nightly_cmd(), *args],
        cwd=cwd,
        env=child_env(env),
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=err,
        text=True,
        # SIGINT as a terminal's Ctrl-C finds it: a suite started in the background (nohup, `&`
        # in a script) ignores SIGINT, an ignored SIGINT is inherited, and Python then installs
        # no KeyboardInterrupt handler (the Ctrl-C test's night ran on, stacks showed).
        preexec_fn=_default_sigint,
    )
    return Started(proc, out_path, err_path, [out, err])


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def alive(pid: int) -> bool:
    """True when `pid` is a live process (a zombie is not alive)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(pred: Callable[[], object], timeout: float = 30, what: str = "") -> None:
    """Poll `pred` every 20 ms until it is true; fail the test after `timeout` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or pred}")
