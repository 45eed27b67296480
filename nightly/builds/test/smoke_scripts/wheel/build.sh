#!/usr/bin/env bash
# Smoke test of a wheel, run by nightly through the build's executor (host or container).
# SOURCE_DIR holds the wheel(s) under test. Environment: EXPECT_VERSION (the wheel version,
# e.g. 1.0.0.dev20190131+cu100), BUILD_VERSION, SMOKE_IMPORT, SMOKE_CUDA_CHECK,
# SMOKE_COMMAND; PYTHON when the executor found the interpreter (else it is looked for like
# the recipes do). The GPU part is a stage of its own: ../gputest/build.sh.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../common.sh
. "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
fresh_venv "smoke"
cd "$work"   # never import from a source tree
"$vpy" - <<'PY'
import importlib, importlib.metadata as md, os, sys
name = os.environ["SMOKE_IMPORT"]
expect = os.environ["EXPECT_VERSION"]
mod = importlib.import_module(name)
dist_versions = {d.metadata["Name"]: d.version for d in md.distributions()}
ours = [v for n, v in dist_versions.items() if n.replace("-", "_").lower() == name.lower()]
if not ours:  # import name != project name (pycairo installs cairo): who installed it?
    top = name.split(".")[0]
    ours = [d.version for d in md.distributions()
            if any(f.parts and f.parts[0].split(".")[0] == top for f in d.files or [])]
version = ours[0] if ours else None
print(f"smoke: imported {name} from {mod.__file__}; installed version {version}; "
      f"__version__ {getattr(mod, '__version__', None)}")
if version != expect:
    sys.exit(f"smoke: installed version {version} is not the expected {expect}")
mv = getattr(mod, "__version__", None)
if mv is not None and mv not in (expect, os.environ["BUILD_VERSION"]):
    if os.environ.get("NIGHTLY_VERSION_FROM") == "rewrite":
        # Only the wheel's metadata was rewritten: the code still says the release.
        print(f"smoke: note: {name}.__version__ is {mv}, a constant in the project's code "
              "(version_from = rewrite sets the wheel's version, never the code's)")
    else:
        sys.exit(f"smoke: {name}.__version__ is {mv}, expected {expect}")
PY
gil_check "$vpy" "$SMOKE_IMPORT"
# CUDA builds only (ACCELERATOR; callers before it: any DESIRED_CUDA but cpu).
if [ "${ACCELERATOR:-${DESIRED_CUDA:-cpu}}" != cpu ] && [ "${ACCELERATOR:-cuda}" = cuda ] &&
   [ -n "${SMOKE_CUDA_CHECK:-}" ]; then
  echo "smoke: CUDA build check"
  "$vpy" -c "$SMOKE_CUDA_CHECK"
  echo "smoke: CUDA build check passed"
fi
if [ -n "${SMOKE_COMMAND:-}" ]; then
  echo "smoke: project command: $SMOKE_COMMAND"
  PYTHON="$vpy" bash -c "$SMOKE_COMMAND"
fi
echo "smoke: passed"
