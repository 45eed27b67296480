#!/usr/bin/env bash
# wheel: the macOS wheel of a setuptools project with native code, for one Python
# (DESIRED_PYTHON), versioned BUILD_VERSION. macOS has no CUDA, so DESIRED_CUDA must be
# cpu. Shared libraries from outside the system are copied into the wheel by
# delocate-wheel when delocate is installed (the macOS counterpart of auditwheel).
#
# Environment: the recipe contract of docs/recipes.md, plus (all optional) PYTHON and WORK_DIR
# as described in recipes/common/lib.sh, and:
#   MACOSX_DEPLOYMENT_TARGET   oldest macOS the wheel supports (setuptools and the
#                              compiler read it; it ends up in the wheel's platform tag).
# On Linux this recipe fails at once: Linux wheels are what the manywheel recipe builds.
# Written for macOS's /bin/bash 3.2 as well as newer bash.
set -euo pipefail

# shellcheck disable=SC2034  # read by common/lib.sh
RECIPE=wheel
# shellcheck source-path=SCRIPTDIR source=../common/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../common/lib.sh"

# Checked before anything else (even the environment): the answer does not depend on it,
# and a build queued on the wrong machine should say so in its first line.
if [[ "$(uname -s)" != Darwin ]]; then
    die "wheel builds are macOS builds; use manywheel on Linux (this machine runs $(uname -s))"
fi

init_recipe
require_env DESIRED_PYTHON
is_cuda_build && die "DESIRED_CUDA=$DESIRED_CUDA: there is no CUDA on macOS; wheel builds are cpu only"

# shellcheck disable=SC2119  # no options: the version gets +cuXYZ for CUDA builds
build_python_wheel

final="$WHEEL"
if command -v delocate-wheel >/dev/null 2>&1; then
    log "running: delocate-wheel -w $WORK_DIR/wheelhouse -v $(basename "$WHEEL")"
    if delocate-wheel -w "$WORK_DIR/wheelhouse" -v "$WHEEL" >&2; then
        final="$WORK_DIR/wheelhouse/$(basename "$WHEEL")"
        [[ -f "$final" ]] || die "delocate-wheel did not write $final"
    else
        warn "delocate-wheel failed (output above); shipping the wheel as built"
    fi
else
    warn "delocate is not installed: shipping the wheel as built (libraries outside the system are not bundled)"
fi

deliver "$final"
