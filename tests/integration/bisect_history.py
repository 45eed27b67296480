"""A git history of the demo project for `nightly bisect` (tests and benchmarks/bench_bisect.py).

The repository is examples/demo plus the C files a cheap recipe compiles (its `RECIPE`): every
configuration compiles src/common_extra.c; CPU configurations src/cpu_only.c; CUDA ones the
host side of the kernels, cuda/host.c, which includes cuda/host.h (only that configuration's
recipe path reads it, as only CUDA builds read a CUDA header). `gen` extra C files, slow to
compile, make the compiler cache matter (the benchmark).

  commit 0              night 1 (DAY1 22:00): everything builds          GOOD
  commits 1..64         DAY2; night 2 builds commit 64                   BAD (GOOD..BAD: 64)
    commit BREAK (45)   cuda/host.h includes <cuda_fp8.h>: the CUDA build fails
    commit SKIP (32)    src/common_extra.c has a syntax error (every build fails, differently);
                        commit 33 fixes it
  commits 65..67        DAY3; commit 66 breaks src/cpu_only.c (the CPU build only); night 3
                        builds commit 67
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DAY1, DAY2, DAY3 = "2026_11_22", "2026_11_23", "2026_11_24"
BREAK, SKIP, UNRELATED, N_DAY2 = 45, 32, 66, 64
CUDA_SIGNATURE = "fatal error: cuda_fp8.h: No such file or directory"

RECIPE = r"""#!/usr/bin/env bash
# A cheap stand-in for the demo's build: compiles the C files each configuration's real build
# compiles (with the compiler cache's CC when it is on), packs the objects.
set -euo pipefail
CC="${CC:-cc}"
cd "$WORK_DIR"
for f in "$SOURCE_DIR"/gen/*.c; do [ -e "$f" ] && "$CC" -O2 -c "$f" -o "gen_$(basename "$f" .c).o"; done
"$CC" -c "$SOURCE_DIR/src/common_extra.c" -o common.o
if [ "$DESIRED_CUDA" = cpu ]; then "$CC" -c "$SOURCE_DIR/src/cpu_only.c" -o cpu.o
else "$CC" -c "$SOURCE_DIR/cuda/host.c" -o host.o; fi
mkdir -p "$OUTPUT_DIR"
tar czf "$OUTPUT_DIR/nightlydemo-${DESIRED_PYTHON}-${DESIRED_CUDA}-${BUILD_VERSION}.tar.gz" *.o
"""


@dataclass
class History:
    src: Path
    commits: list[str]  # index i: commit i

    @property
    def good(self) -> str:
        return self.commits[0]

    @property
    def bad(self) -> str:
        return self.commits[N_DAY2]


def git(cwd: Path, *args: str, date: str | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.com",
           "GIT_COMMITTER_NAME": "Dev", "GIT_COMMITTER_EMAIL": "dev@example.com"}
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def _gen_file(i: int) -> str:
    # Enough work for the optimiser that a cache hit is worth having.
    body = "\n".join(f"static double f{i}_{k}(double x) {{ double s = 0; for (int j = 0; j < {k + 9}; j++)"
                     f" s += x * j / (j + {k + 1}.0); return s; }}" for k in range(120))
    calls = " + ".join(f"f{i}_{k}(x)" for k in range(120))
    return f"{body}\ndouble gen{i}(double x) {{ return {calls}; }}\n"


def make_history(base: Path, *, gen: int = 0) -> History:
    src = base / "src"
    shutil.copytree(REPO / "examples" / "demo", src, ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "build", "dist"))
    (src / "src" / "common_extra.c").write_text("int demo_common(void) { return 1; }\n")
    (src / "src" / "cpu_only.c").write_text("int demo_cpu(void) { return 2; }\n")
    (src / "cuda" / "host.h").write_text("/* the host side of the CUDA kernels */\n#define DEMO_CUDA 1\n")
    (src / "cuda" / "host.c").write_text(
        '#include "host.h"\nint demo_cuda_host(void) { return DEMO_CUDA; }\n')
    if gen:
        (src / "gen").mkdir()
        for i in range(gen):
            (src / "gen" / f"g{i}.c").write_text(_gen_file(i))
    git(src, "init", "-q", "-b", "main")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "demo with the CUDA host side", date="2026-11-22T22:00:00")
    commits = [git(src, "rev-parse", "HEAD")]
    for i in range(1, N_DAY2 + 4):
        day, minute = ("2026-11-23", i) if i <= N_DAY2 else ("2026-11-24", i - N_DAY2)
        subject = f"change {i}"
        with (src / "CHANGES").open("a") as f:
            f.write(f"change {i}\n")
        if i == BREAK:
            (src / "cuda" / "host.h").write_text(
                "/* the host side of the CUDA kernels */\n#include <cuda_fp8.h>\n#define DEMO_CUDA 1\n")
            subject = "Use FP8 types in the CUDA host code"
        elif i == SKIP:
            (src / "src" / "common_extra.c").write_text("int demo_common(void) { return 1 }\n")
            subject = "Refactor common code (does not compile)"
        elif i == SKIP + 1:
            (src / "src" / "common_extra.c").write_text("int demo_common(void) { return 1; }\n")
            subject = "Fix the build of the common code"
        elif i == UNRELATED:
            (src / "src" / "cpu_only.c").write_text('#error "cpu_only.c: unsupported platform"\n')
            subject = "Break the CPU-only code"
        git(src, "add", "-A")
        git(src, "commit", "-q", "-m", subject, date=f"{day}T{10 + minute // 60:02d}:{minute % 60:02d}:00")
        commits.append(git(src, "rev-parse", "HEAD"))
    return History(src=src, commits=commits)


def write_recipes(base: Path) -> None:
    r = base / "recipes" / "manywheel" / "build.sh"
    r.parent.mkdir(parents=True, exist_ok=True)
    r.write_text(RECIPE)
    r.chmod(0o755)
