#!/usr/bin/env bash
# The whole test suite on a fresh machine: creates .venv, installs nightly with its test
# dependencies, starts the real servers the tests need (Podman's API through
# scripts/container-engine.sh; moto, pypiserver, SMTP and Dask are started by the tests
# themselves), then runs ruff, shellcheck, mypy --strict and pytest. Extra arguments go to pytest.
#
# `--fast` (first argument): the tier a developer runs while working, in a few minutes: ruff,
# mypy --strict and tests/unit only (shellcheck too when it is installed): no apt package, no
# container engine, no browser, no server. tests/unit refuses a test that needs one
# (tests/support/markers.py).
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
log "installing nightly-builds[test]"
.venv/bin/python -m pip install -q --disable-pip-version-check -U pip
# The distribution was `nightly` before it became `nightly-builds`: a .venv made before then
# holds an editable install under the old name, which would shadow the new one's metadata.
.venv/bin/python -m pip uninstall -q -y nightly >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'

log "ruff"
.venv/bin/ruff check nightly tests benchmarks recipes

# Every shell script of the project: the recipes (with the common/lib.sh they source), the
# smoke scripts, these scripts and CI's entry point.
if [ -n "$FAST" ]; then
  if command -v shellcheck >/dev/null 2>&1; then
    log "shellcheck"
    git ls-files -z -- '*.sh' .ci/run | xargs -0 shellcheck -x
  fi
  log "mypy --strict"
  .venv/bin/mypy
  log "pytest tests/unit"
  exec .venv/bin/python -m pytest tests/unit "$@"
fi
if ! command -v shellcheck >/dev/null 2>&1; then
  log "installing shellcheck"
  apt-get install -y -q shellcheck >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q shellcheck >/dev/null; }
fi
log "shellcheck"
git ls-files -z -- '*.sh' .ci/run | xargs -0 shellcheck -x
log "mypy --strict"
.venv/bin/mypy

if [ -z "${NIGHTLY_NO_ENGINE:-}" ]; then
  log "container engine (Podman serving the Docker API)"
  DOCKER_HOST=$(NIGHTLY_ENGINE_PYTHON=.venv/bin/python bash scripts/container-engine.sh | tail -n 1 | sed 's/^DOCKER_HOST=//')
  export DOCKER_HOST
fi
if [ -z "${NIGHTLY_NO_BROWSER:-}" ] && [ -f scripts/browser.sh ]; then
  log "headless Chromium"
  bash scripts/browser.sh
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

log "pytest"
# The ten slowest tests close the full run's output: where the suite's time goes.
exec .venv/bin/python -m pytest --durations=10 "$@"
