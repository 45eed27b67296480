#!/usr/bin/env bash
# The GPU part of a CUDA wheel's test, run by nightly on a GPU host (a machine with
# `gpu = true`, or a cluster worker with the `gpu` resource), after the CPU part passed where
# the build ran. SOURCE_DIR holds the wheel(s); SMOKE_GPU_CHECK is Python code that uses the
# GPU, SMOKE_GPU_COMMAND the project's GPU tests (bash; $PYTHON is the test interpreter).
set -euo pipefail
work=${WORK_DIR:-$(mktemp -d)}
py=${PYTHON:-}
if [ -z "$py" ]; then
  num=${DESIRED_PYTHON%%[a-z]*}
  for cand in "/opt/python/cp${num/./}-cp${num/./}"*/bin/python "python$num" python3; do
    if command -v "$cand" >/dev/null 2>&1; then py=$cand; break; fi
  done
fi
[ -n "$py" ] || { echo "gpu test: no interpreter for Python $DESIRED_PYTHON"; exit 1; }
echo "gpu test: fresh virtual environment with $py on $(hostname)"
"$py" -m venv "$work/venv"
vpy="$work/venv/bin/python"
"$vpy" -m pip install --quiet --no-index --no-deps "$SOURCE_DIR"/*.whl
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
