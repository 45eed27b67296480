"""Small projects with bash recipes for `nightly` to build, and the recipes' traces.

A project made by `write_project` has:
  nightly.toml        root = "nightlies", the given matrix, one local machine, interpreters
                      mapped to this host's python3 (except the ones listed as missing) and
                      CUDA versions mapped to a fake toolkit whose bin/nvcc is a stub
  src/                the project's source (a plain folder)
  recipes/<pkg>/build.sh   from `recipes` (see `recipe_text` for a configurable one)
  signals/            where the recipes of `recipe_text` leave traces (see below)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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
# The tests' own recipes may run as root: root with credentials around must say who builds
# (nightly/hardening.py), and these tests' recipes are their own.
ROOT_OPT_IN = "root" if os.geteuid() == 0 else ""


def local_machine(*, queues: int = 1, user: str = ROOT_OPT_IN) -> str:
    """One local machine "m" of `queues` queues, and who builds there ([executor.local] user:
    a build account, or root's opt-in): the TOML the tests' configs end their machine with."""
    return f"""
[[machines]]
name = "m"
platform = "linux"
queues = {queues}
executor = "local"

[executor.local]
user = "{user}"
"""


def run_args(config: Path, *extra: str, command: str = "run") -> list[str]:
    """`COMMAND --config CONFIG --date DATE EXTRA...`: a command on the test nights' day."""
    return [command, "--config", str(config), "--date", DATE, *extra]


# ---------------------------------------------------------------------------- recipes


RECIPE_HEAD = r"""#!/usr/bin/env bash
# A test recipe: behaves as told per build (see tests/support/projects.py).
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
{local_machine(queues=queues)}
[executor.local.pythons]
{pythons}

[executor.local.cuda]
{cudas}

{extra.strip()}
"""
    config = base / "nightly.toml"
    config.write_text(text)
    return Project(path=base, config=config, signals=signals, day=base / "nightlies" / DATE)


