"""Shared fixtures for the integration tests: small projects with bash recipes, the real
`nightly` command run as a subprocess, and checks on the processes a night leaves behind.

Test modules take everything through fixtures (no `import conftest`).

A project made by `night_project` has:
  nightly.toml        root = "nightlies", the given matrix, one local machine, interpreters
                      mapped to this host's python3 (except the ones listed as missing) and
                      CUDA versions mapped to a fake toolkit whose bin/nvcc is a stub
  src/                the project's source (a plain folder)
  recipes/<pkg>/build.sh   from `recipes` (see `recipe_text` for a configurable one)
  signals/            where the recipes of `recipe_text` leave traces (see below)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NIGHTLY = REPO / ".venv" / "bin" / "nightly"
DATE = "2024_05_01"  # every test night runs for this date
VERSION = "1.0.0.dev20240501"
# Interpreter spellings mapped to this host's python3 in a test project; "3.5" is left out
# on purpose (absent here: the missing-interpreter test relies on it).
HOST_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
MAPPED_PYTHONS = (
    "2.7", "2.7m", "2.7mu", "3.6", "3.6m", "3.7", "3.7m", "3.8", "3.9",
    "3.10", "3.11", "3.12", "3.13", "3.14",
)  # fmt: skip
FAKE_CUDAS = ("cu80", "cu90", "cu100", "cu126", "cu128", "cu130")
SECRET_NAME = "AWS_SECRET_ACCESS_KEY"
SECRET_VALUE = "s3cr3t-value-that-must-never-be-written-9f2c"


def _nightly_cmd() -> list[str]:
    return [str(NIGHTLY)] if NIGHTLY.exists() else [sys.executable, "-m", "nightly"]


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment for a `nightly` process: this one, plus a secret that no
    recipe or file may ever see, minus anything that makes output a terminal's."""
    env = {k: v for k, v in os.environ.items() if k not in ("NIGHTLY_CONFIG", "COLUMNS")}
    env[SECRET_NAME] = SECRET_VALUE
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------- recipes


RECIPE_HEAD = r"""#!/usr/bin/env bash
# A test recipe: behaves as told per build (see tests/integration/conftest.py).
set -euo pipefail
SIG=@SIGNALS@
if [ "$PACKAGE_TYPE" = libtorch ]; then ID="${PACKAGE_TYPE}_${LIBTORCH_VARIANT}_${DESIRED_CUDA}";
else ID="${PACKAGE_TYPE}_${DESIRED_PYTHON}_${DESIRED_CUDA}"; fi
echo "start $$" >> "$SIG/$ID.starts"
echo "$$" >> "$SIG/pids"
env > "$SIG/$ID.env"
echo "building $ID with $PYTHON"
go_wait() {  # wait until the test says go (a file), at most $1 s
    local n=0
    while [ ! -e "$SIG/$ID.go" ] && [ "$n" -lt $(( $1 * 20 )) ]; do sleep 0.05; n=$((n + 1)); done
}
"""

RECIPE_TAIL = r"""
mkdir -p "$OUTPUT_DIR"
f="$OUTPUT_DIR/${ID}-${BUILD_VERSION}.tar.gz"
# Written in two steps: a half-written package would show in packages/ if it were
# filed before the recipe ended.
printf 'package %s\n' "$ID" > "$f"
head -c 3000 /dev/urandom | od -An -x >> "$f"
echo "done $ID"
echo "done $$" >> "$SIG/$ID.starts"
"""

# What a build may do, by name (the `behaviours` of recipe_text). {n}: the argument after ':'.
BEHAVIOURS = {
    "ok": "",
    "fail": 'echo "error: the compiler failed" >&2; exit 3',
    "nopkg": 'echo "forgot to write the package"; exit 0',
    # A child in the background, then wait: only a process-group kill ends both.
    "hang": 'sleep 1000 & echo "$!" >> "$SIG/pids"; echo "child $!"; wait',
    # A child left running in the background: the end of the build must kill it.
    "child": 'sleep 1000 & echo "$!" >> "$SIG/pids"',
    "sleep": "sleep {n}",
    # Wait for the test's go file (at most n s), then carry on.
    "go": "go_wait {n}",
    # Fail the first n attempts (counting the lines of .starts), then succeed.
    "flaky": '[ "$(grep -c ^start "$SIG/$ID.starts")" -gt {n} ] || {{ echo flaky; exit 7; }}',
    # Work done by a child process: sleep n s in the background and wait for it.
    "bgsleep": 'sleep {n} & w=$!; echo "$w" >> "$SIG/pids"; wait "$w"',
}


def recipe_text(signals: Path, behaviours: Mapping[str, str] | None = None, default: str = "ok") -> str:
    """A bash recipe that, for each build id, does what `behaviours` says (default
    `default`), e.g. {"manywheel_3.7m_cpu": "fail", "manywheel_3.6m_cpu": "sleep:2"}.
    Several behaviours chain with '+' ("go:30+fail"). Traces in `signals`:
    <id>.starts (one "start PID" per attempt, "done PID" when it delivered), <id>.env (the
    recipe's environment), pids (every recipe and background child started)."""

    def snippet(spec: str) -> str:
        parts = []
        for item in spec.split("+"):
            name, _, arg = item.partition(":")
            if name not in BEHAVIOURS:
                raise ValueError(f"unknown behaviour {name}")
            parts.append(BEHAVIOURS[name].format(n=arg))
        return "\n    ".join(p for p in parts if p) or ":"

    cases = "".join(f'  "{bid}")\n    {snippet(spec)}\n    ;;\n' for bid, spec in (behaviours or {}).items())
    return (
        RECIPE_HEAD.replace("@SIGNALS@", str(signals))
        + f'case "$ID" in\n{cases}  *)\n    {snippet(default)}\n    ;;\nesac\n'
        + RECIPE_TAIL
    )


# ---------------------------------------------------------------------------- projects


@dataclass
class Project:
    path: Path
    config: Path
    signals: Path
    day: Path  # ROOT/DATE, the day folder of every test night

    def starts(self, build_id: str) -> int:
        p = self.signals / f"{build_id}.starts"
        return p.read_text().count("start ") if p.exists() else 0

    def delivered(self, build_id: str) -> int:
        p = self.signals / f"{build_id}.starts"
        return p.read_text().count("done ") if p.exists() else 0

    def go(self, build_id: str) -> None:
        (self.signals / f"{build_id}.go").touch()

    def pids(self) -> list[int]:
        p = self.signals / "pids"
        return [int(x) for x in p.read_text().split()] if p.exists() else []

    def state(self) -> dict:  # type: ignore[type-arg]
        import json

        p = self.day / "state.json"
        return json.loads(p.read_text()) if p.exists() else {"builds": {}}

    def summary(self) -> dict:  # type: ignore[type-arg]
        import json

        return json.loads((self.day / "summary.json").read_text())  # type: ignore[no-any-return]


MakeProject = Callable[..., Project]


def write_project(
    base: Path,
    *,
    recipes: Mapping[str, str] | None = None,
    matrix: str,
    behaviours: Mapping[str, str] | None = None,
    queues: int = 2,
    extra: str = "",
    missing_pythons: Sequence[str] = (),
) -> Project:
    base.mkdir(parents=True, exist_ok=True)
    signals = base / "signals"
    signals.mkdir(exist_ok=True)
    src = base / "src"
    src.mkdir(exist_ok=True)
    (src / "README").write_text("a test project\n")
    cuda_root = base / "fake-cuda"
    (cuda_root / "bin").mkdir(parents=True, exist_ok=True)
    nvcc = cuda_root / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'nvcc: fake toolkit'\n")
    nvcc.chmod(0o755)
    if recipes is None:
        packages = {
            line.split(".")[2].strip(" ]\n")
            for line in matrix.splitlines()
            if line.strip().startswith("[matrix.")
        }
        recipes = {p: recipe_text(signals, behaviours) for p in packages}
    for package, text in recipes.items():
        r = base / "recipes" / package / "build.sh"
        r.parent.mkdir(parents=True, exist_ok=True)
        r.write_text(text)
        r.chmod(0o755)
    pythons = "\n".join(f'"{p}" = "{HOST_PYTHON}"' for p in MAPPED_PYTHONS if p not in missing_pythons)
    cudas = "\n".join(f'"{c}" = "{cuda_root}"' for c in FAKE_CUDAS)
    text = f"""\
root = "nightlies"

[project]
name = "demo"
source = "src"
base_version = "1.0.0"

{matrix.strip()}

[[machines]]
name = "m"
platform = "linux"
queues = {queues}
executor = "local"

[executor.local]
# Root with credentials around must say who builds (nightly/hardening.py); these tests'
# recipes are their own.
user = "{"root" if os.geteuid() == 0 else ""}"

[executor.local.pythons]
{pythons}

[executor.local.cuda]
{cudas}

{extra.strip()}
"""
    config = base / "nightly.toml"
    config.write_text(text)
    return Project(path=base, config=config, signals=signals, day=base / "nightlies" / DATE)


@pytest.fixture
def night_project(tmp_path: Path) -> Iterator[MakeProject]:
    """night_project(matrix=TOML, behaviours={build_id: spec}, queues=2, extra=TOML,
    recipes={package: bash text}, missing_pythons=(), name="p") -> Project in tmp_path.

    `extra` is appended to nightly.toml (e.g. "[retries]\\ninfra = 1"). At teardown every
    process a recipe recorded is killed (the test's own assertions come first)."""
    made: list[Project] = []

    def make(name: str = "p", **kwargs: object) -> Project:
        p = write_project(tmp_path / name, **kwargs)  # type: ignore[arg-type]
        made.append(p)
        return p

    yield make
    for p in made:
        for pid in p.pids():
            if alive(pid):
                with _suppress():
                    os.kill(pid, signal.SIGKILL)


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], OSError)  # type: ignore[arg-type]


@pytest.fixture
def make_recipe() -> Callable[..., str]:
    """make_recipe(signals, behaviours, default="ok") -> the text of a configurable recipe."""
    return recipe_text


@pytest.fixture
def caller_secret() -> tuple[str, str]:
    """(name, value) of the secret in the environment of every `nightly` these tests run."""
    return SECRET_NAME, SECRET_VALUE


# ---------------------------------------------------------------------------- the CLI


RunCli = Callable[..., "tuple[int, str, str]"]


def run_cli_fn(
    args: Sequence[str],
    cwd: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 90,
) -> tuple[int, str, str]:
    """Run `nightly ARGS` as a subprocess (not on a terminal): (exit code, stdout, stderr)."""
    proc = subprocess.run(
        [*_nightly_cmd(), *args],
        cwd=cwd,
        env=child_env(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def run_cli() -> RunCli:
    """run_cli(args, cwd=None, env=None, timeout=90) -> (code, stdout, stderr)."""
    return run_cli_fn


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
        code = self.proc.wait(timeout=timeout)
        for f in self._files:
            f.close()  # type: ignore[attr-defined]
        return code, self.out_path.read_text(), self.err_path.read_text()


StartCli = Callable[..., Started]


@pytest.fixture
def start_cli(tmp_path: Path) -> Iterator[StartCli]:
    """start_cli(args, cwd=None, env=None) -> Started: `nightly ARGS` running in the
    background (for kill -9, SIGINT and lock tests). Killed at teardown if still running."""
    started: list[Started] = []

    def start(
        args: Sequence[str], cwd: Path | None = None, *, env: Mapping[str, str] | None = None
    ) -> Started:
        n = len(started)
        out_path, err_path = tmp_path / f"cli-{n}.out", tmp_path / f"cli-{n}.err"
        out, err = out_path.open("w"), err_path.open("w")
        proc = subprocess.Popen(
            [*_nightly_cmd(), *args],
            cwd=cwd,
            env=child_env(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            text=True,
        )
        s = Started(proc, out_path, err_path, [out, err])
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
        for f in s._files:
            f.close()  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- processes


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


@pytest.fixture
def wait_until() -> Callable[..., None]:
    """wait_until(pred, timeout=30, what="") polls pred until true, else fails."""
    return wait_for


@pytest.fixture
def is_alive() -> Callable[[int], bool]:
    return alive
