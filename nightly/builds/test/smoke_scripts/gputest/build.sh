#!/usr/bin/env bash
# The GPU part of a CUDA wheel's test, run by nightly on a GPU host (a machine with
# `gpu = true`, or a cluster worker with the `gpu` resource), after the CPU part passed where
# the build ran. SOURCE_DIR holds the wheel(s); SMOKE_GPU_CHECK is Python code that uses the
# GPU, SMOKE_GPU_COMMAND the project's GPU tests (bash; $PYTHON is the test interpreter).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
fresh_venv "gpu test"
cd "$work"   # never import from a source tree
if [ -n "${SMOKE_GPU_CHECK:-}" ]; then
  echo "gpu test: GPU check"
  "$vpy" -c "$SMOKE_GPU_CHECK"
  echo "gpu test: GPU check passed"
fi
if [ -n "${SMOKE_GPU_COMMAND:-}" ]; then
  echo "gpu test: project command: $SMOKE_GPU_COMMAND"
  PYTHON="$vpy" bash -c "$SMOKE_GPU_COMMAND"
fi
echo "gpu test: passed"
