#!/usr/bin/env bash
# The whole test suite on a fresh machine: creates .venv, installs nightly with its test
# dependencies, starts the real servers the tests need (Podman's API through
# scripts/container-engine.sh; moto, pypiserver, SMTP and Dask are started by the tests
# themselves), then runs ruff, shellcheck, mypy --strict (over nightly/ and tests/, as
# pyproject's [tool.mypy] says) and pytest (test files on
# NIGHTLY_TEST_WORKERS parallel workers, default 2). Extra arguments go to pytest.
#
# `--fast` (first argument): the tier a developer runs while working, under a minute on a
# quiet 2-core machine: ruff, then mypy --strict beside tests/unit on the same workers
# (shellcheck too when it is installed): no apt package, no container engine, no browser, no
# server, and no pip unless pyproject.toml or setup.py changed since the last install.
# tests/unit refuses a test that needs one (tests/support/markers.py).
set -euo pipefail
cd "$(dirname "$0")/.."

FAST=""
if [ "${1:-}" = "--fast" ]; then
  FAST=1
  shift
fi

log() { printf '\n== %s\n' "$*" >&2; }

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
# The install is editable: only a change to what pip reads (pyproject.toml, setup.py) needs
# it again. The stamp holds their hash, written after an install that succeeded; the fast
# tier skips pip when it matches (10-30 s of its minute), the full run always installs.
STAMP=.venv/.nightly-install-stamp
WANT=$(cat pyproject.toml setup.py | sha256sum | cut -d' ' -f1)
if [ -n "$FAST" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ] \
    && .venv/bin/python -c 'import nightly, pytest, xdist' 2>/dev/null; then
  log "nightly-builds[test] is installed (pyproject.toml and setup.py unchanged)"
else
  log "installing nightly-builds[test]"
  rm -f "$STAMP"
  .venv/bin/python -m pip install -q --disable-pip-version-check -U pip
  # The distribution was `nightly` before it became `nightly-builds`: a .venv made before
  # then holds an editable install under the old name, which would shadow the new one's
  # metadata.
  .venv/bin/python -m pip uninstall -q -y nightly >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
  echo "$WANT" >"$STAMP"
fi

# Test files run on NIGHTLY_TEST_WORKERS parallel workers (default 2; 0: one process, no
# xdist), in both tiers.
WORKERS=${NIGHTLY_TEST_WORKERS:-2}

log "ruff"
.venv/bin/ruff check nightly tests benchmarks recipes

# Every shell script of the project: the recipes (with the common/lib.sh they source), the
# smoke scripts, these scripts and CI's entry point.
if [ -n "$FAST" ]; then
  if command -v shellcheck >/dev/null 2>&1; then
    log "shellcheck"
    git ls-files -z -- '*.sh' .ci/run | xargs -0 shellcheck -x
  fi
  # mypy runs beside pytest: one process on one core, cold (a fresh clone: ~20 s) while the
  # unit tier's workers start, collect and wait on the subprocesses and sleeps of its tests;
  # its report follows pytest's.
  log "mypy --strict (nightly, tests), beside pytest tests/unit"
  MYPY_OUT=$(mktemp)
  trap 'rm -f "$MYPY_OUT"' EXIT
  .venv/bin/mypy >"$MYPY_OUT" 2>&1 &
  MYPY_PID=$!
  UNIT_PARALLEL=()
  if [ "$WORKERS" != 0 ]; then
    UNIT_PARALLEL=(-n "$WORKERS")
  fi
  STARTED=$SECONDS
  RC=0
  .venv/bin/python -m pytest "${UNIT_PARALLEL[@]}" tests/unit "$@" || RC=$?
  log "pytest took $((SECONDS - STARTED)) s"
  MYPY_RC=0
  wait "$MYPY_PID" || MYPY_RC=$?
  log "mypy --strict (nightly, tests)"
  cat "$MYPY_OUT"
  if [ "$RC" = 0 ]; then
    RC=$MYPY_RC
  fi
  log "whole script ${SECONDS} s; load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
  exit "$RC"
fi
# apt packages first (one apt-get at a time: dpkg's lock).
if ! command -v shellcheck >/dev/null 2>&1; then
  log "installing shellcheck"
  apt-get install -y -q shellcheck >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q shellcheck >/dev/null; }
fi

# The kill -9 tests stop nightly inside chosen system calls with strace.
if ! command -v strace >/dev/null 2>&1; then
  log "installing strace"
  apt-get install -y -q strace >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q strace >/dev/null; }
fi

# The corpus (tests/integration/test_corpus.py) builds pycairo against the system's cairo.
if ! pkg-config --exists cairo 2>/dev/null; then
  log "installing libcairo2-dev (the corpus's pycairo builds against it)"
  apt-get install -y -q libcairo2-dev pkg-config >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q libcairo2-dev pkg-config >/dev/null; }
fi

# The aarch64 tests (tests/integration/test_aarch64.py, test_beyond_cuda.py) run the target's
# Python under qemu-user.
if ! command -v qemu-aarch64 >/dev/null 2>&1; then
  log "installing qemu-user (aarch64 wheels are tested under emulation)"
  apt-get install -y -q qemu-user >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q qemu-user >/dev/null; }
fi

if [ -z "${NIGHTLY_NO_BROWSER:-}" ] && [ -f scripts/browser.sh ]; then
  log "headless Chromium"
  bash scripts/browser.sh
fi

# The engine starts (cold: Podman installed, a Debian rootfs debootstrapped and imported, a few
# minutes) while shellcheck and mypy run; the apt installs above are done by then, so its own
# apt-get (podman, when missing) is the only one.
ENGINE_OUT=""
if [ -z "${NIGHTLY_NO_ENGINE:-}" ]; then
  log "container engine (Podman serving the Docker API), started in the background"
  ENGINE_OUT=$(mktemp)
  trap 'rm -f "$ENGINE_OUT"' EXIT
  NIGHTLY_ENGINE_PYTHON=.venv/bin/python bash scripts/container-engine.sh >"$ENGINE_OUT" &
  ENGINE_PID=$!
fi

log "shellcheck"
git ls-files -z -- '*.sh' .ci/run | xargs -0 shellcheck -x
log "mypy --strict (nightly, tests)"
.venv/bin/mypy

if [ -n "$ENGINE_OUT" ]; then
  log "waiting for the container engine"
  if ! wait "$ENGINE_PID"; then
    echo "scripts/container-engine.sh failed (its messages are above)" >&2
    exit 1
  fi
  DOCKER_HOST=$(tail -n 1 "$ENGINE_OUT" | sed 's/^DOCKER_HOST=//')
  rm -f "$ENGINE_OUT"
  export DOCKER_HOST
fi

# Most of a cold run waits on downloads, debootstrap and containers rather than on a core,
# so two workers on two cores finish well before one. A file stays on one worker
# (--dist loadfile: its module fixtures are made once, its tests run in order) except those
# whose tests share nothing, and the heaviest are handed out first (tests/support/schedule.py).
PARALLEL=()
if [ "$WORKERS" != 0 ]; then
  PARALLEL=(-n "$WORKERS" --dist loadfile)
fi
log "pytest (${WORKERS} workers; load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown))"
# The ten slowest tests close the full run's output: where the suite's time goes. The wall
# time and the load average (1, 5, 15 min) close it too: the suite's cold time is a figure
# the project keeps under 60 minutes, and on a shared machine it means little without the load.
STARTED=$SECONDS
RC=0
.venv/bin/python -m pytest "${PARALLEL[@]}" --durations=10 "$@" || RC=$?
log "pytest took $((SECONDS - STARTED)) s, whole script ${SECONDS} s; load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
exit "$RC"
