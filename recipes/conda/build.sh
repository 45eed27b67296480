#!/usr/bin/env bash
# conda: a conda package of a setuptools project with native code, for one Python
# (DESIRED_PYTHON) and one CUDA flavour (DESIRED_CUDA), version BUILD_VERSION (conda has
# no local versions: the CUDA flavour is in the build string instead), build string
# py<XY>_<cpu|cudaXYZ>_<BUILD_NUMBER> (py311_cpu_1, py311_cuda130_1).
#
# How: the project's wheel is built exactly as the manywheel recipe builds it (same
# interpreter search, venv, CUDA toolkit, version check), then packaged by rattler-build
# (through py-rattler-build's Python API) from recipes/conda/recipe.yaml, fully offline
# with no channel. Where py-rattler-build is missing but conda-build is installed,
# conda-build packages it from recipes/conda/meta.yaml instead.
#
# Environment: the recipe contract of docs/recipes.md, plus (all optional) PYTHON, CUDA_HOME,
# WORK_DIR as described in recipes/common/lib.sh, and:
#   NIGHTLY_PYTHON  an interpreter that has py-rattler-build (the orchestrator's own,
#                   sys.executable). Unset: the first of python3 / python on PATH, then
#                   PYTHON, that can import rattler_build.
#   PROJECT_NAME    the conda package name. Unset: the wheel's project name, lower-cased
#                   with runs of "_" and "." turned into "-" (as conda and PEP 503 spell it).
# Writes exactly one .conda (rattler-build) or .tar.bz2 (conda-build) into OUTPUT_DIR.
set -euo pipefail

# shellcheck disable=SC2034  # read by common/lib.sh
RECIPE=conda
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=../common/lib.sh
source "$HERE/../common/lib.sh"

init_recipe
require_env DESIRED_PYTHON

# Conda versions cannot carry "+cu130"; a release or nightly version already has none.
conda_version="${BUILD_VERSION%%+*}"
BUILD_VERSION="$conda_version"
build_python_wheel --no-local-version

# Choose the packaging tool first-to-last; say which and why.
tool="" rb_python=""
candidates=()
[[ -n "${NIGHTLY_PYTHON:-}" ]] && candidates+=("$NIGHTLY_PYTHON")
for c in python3 python; do
    p="$(command -v "$c" 2>/dev/null || true)"
    [[ -n "$p" ]] && candidates+=("$p")
done
candidates+=("$PYTHON")
for c in "${candidates[@]}"; do
    if "$c" -c 'import rattler_build' >/dev/null 2>&1; then
        rb_python="$c" tool=rattler-build
        break
    fi
done
if [[ -z "$tool" ]]; then
    if command -v conda-build >/dev/null 2>&1 || command -v conda >/dev/null 2>&1 && conda build --help >/dev/null 2>&1; then
        tool=conda-build
    else
        die "neither py-rattler-build (import rattler_build failed with: ${candidates[*]}) nor conda-build is installed; pip install py-rattler-build, or set NIGHTLY_PYTHON to an interpreter that has it"
    fi
fi

# The values the recipe templates read.
name="${PROJECT_NAME:-$(wheel_field "$WHEEL" name)}"
name="$(echo "$name" | tr '[:upper:]' '[:lower:]' | sed -E 's/[._-]+/-/g')"
if is_cuda_build; then
    flavour="cuda$(cuda_release | tr -d .)"
    cuda_major="$(cuda_release | cut -d. -f1)"
else
    flavour=cpu
    cuda_major=""
fi

# glibc_needed WHEEL : the newest GLIBC_x.y symbol version the wheel's binaries use.
glibc_needed() {
    local dir="$WORK_DIR/wheel-elf"
    rm -rf "$dir"
    "$BUILD_PYTHON" - "$1" "$dir" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    for entry in whl.namelist():
        base = entry.rsplit("/", 1)[-1]
        if base.endswith(".so") or ".so." in base:
            whl.extract(entry, sys.argv[2])
PY
    [[ -d "$dir" ]] || return 0
    command -v objdump >/dev/null 2>&1 || return 0
    find "$dir" -type f -exec objdump -p {} + 2>/dev/null |
        sed -n 's/.*GLIBC_\([0-9][0-9.]*\).*/\1/p' | sort -t. -k1,1n -k2,2n -k3,3n | tail -n1
}

NIGHTLY_CONDA_NAME="$name"
NIGHTLY_CONDA_VERSION="$conda_version"
NIGHTLY_CONDA_BUILD_STRING="py$(python_nodot)_${flavour}_${BUILD_NUMBER}"
NIGHTLY_CONDA_PYTHON="${DESIRED_PYTHON%%[a-z]*}"
NIGHTLY_CONDA_GLIBC="$(glibc_needed "$WHEEL")"
NIGHTLY_CONDA_CUDA="$cuda_major"
export NIGHTLY_CONDA_NAME NIGHTLY_CONDA_VERSION NIGHTLY_CONDA_BUILD_STRING NIGHTLY_CONDA_PYTHON \
    NIGHTLY_CONDA_GLIBC NIGHTLY_CONDA_CUDA
[[ -n "$BUILD_PIP" ]] || die "there is no pip for $PYTHON to install the wheel into the package with"
export NIGHTLY_INSTALL_PIP="$BUILD_PIP"
# The wheel alone in a folder: the recipe's source.
export NIGHTLY_WHEEL_DIR="$WORK_DIR/conda-source"
rm -rf "$NIGHTLY_WHEEL_DIR"
mkdir -p "$NIGHTLY_WHEEL_DIR"
cp "$WHEEL" "$NIGHTLY_WHEEL_DIR/"
log "conda package $NIGHTLY_CONDA_NAME $NIGHTLY_CONDA_VERSION $NIGHTLY_CONDA_BUILD_STRING (glibc >= ${NIGHTLY_CONDA_GLIBC:-?}) with $tool"

# The template alone in its folder: rattler-build stores the recipe folder in the package
# (info/recipe), and it should hold the recipe, not the scratch files next to it.
recipe_dir="$WORK_DIR/conda-recipe"
out="$WORK_DIR/conda-out"
rm -rf "$recipe_dir" "$out"
mkdir -p "$recipe_dir" "$out"
packages=()
if [[ "$tool" == rattler-build ]]; then
    cp "$HERE/recipe.yaml" "$recipe_dir/recipe.yaml"
    "$rb_python" "$HERE/rattler_build_driver.py" "$recipe_dir/recipe.yaml" "$out" "$WORK_DIR/conda-packages.txt" ||
        die "rattler-build failed (output above)"
    while IFS= read -r p; do [[ -n "$p" ]] && packages+=("$p"); done <"$WORK_DIR/conda-packages.txt"
else
    cp "$HERE/meta.yaml" "$recipe_dir/meta.yaml"
    # Offline too: no channel but an empty local one (conda-build insists on having one).
    mkdir -p "$WORK_DIR/empty-channel/noarch"
    echo '{"info": {"subdir": "noarch"}, "packages": {}}' >"$WORK_DIR/empty-channel/noarch/repodata.json"
    conda build --no-anaconda-upload --no-test --override-channels \
        -c "file://$WORK_DIR/empty-channel" --output-folder "$out" "$recipe_dir" ||
        die "conda-build failed (output above)"
    shopt -s nullglob
    packages=("$out"/*/"$NIGHTLY_CONDA_NAME-$NIGHTLY_CONDA_VERSION-$NIGHTLY_CONDA_BUILD_STRING".{conda,tar.bz2})
    shopt -u nullglob
fi
((${#packages[@]} == 1)) || die "expected one conda package, got ${#packages[@]}: ${packages[*]:-none}"

# rattler-build writes packages with mode 0600; deliver makes them 0644 so the upload
# step and any web server can read them.
deliver "${packages[0]}"
