# Shared functions of nightly's recipes. Sourced (not run) by recipes/<package>/build.sh.
#
# Everything here is driven by the recipe environment of docs/recipes.md (the recipe
# contract) and knows nothing about a particular project. Variables read here beyond
# the contract, all optional:
#
#   PYTHON        interpreter for DESIRED_PYTHON (the local executor sets it). Unset: look in
#                 the manylinux layout /opt/python/cpXY-cpXY<abi>/bin/python, then pythonX.Y
#                 on PATH, then python3 / python if its version matches.
#   CUDA_HOME     CUDA toolkit root for CUDA builds. Unset: /usr/local/cuda-X.Y, then
#                 /usr/local/cuda (whichever has an nvcc of release CUDA_VERSION).
#   WORK_DIR      writable scratch folder for this build. Unset: a mktemp folder, removed
#                 at exit.
#   PIP_* (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, ...)  pip's own settings:
#                 where isolated builds get their build requirements ([build] index_url, ...).
#   NIGHTLY_BUILD_ISOLATION  0: build without isolation, with the interpreter's (image's)
#                 packages, checked first by buildreqs.py ([build] isolation = false).
#   NIGHTLY_WHEELHOUSE  a folder of build-requirement wheels: the only source of them
#                 (PIP_NO_INDEX=1) ([build] wheelhouse = true).
#   NIGHTLY_VERSION_FROM  env (default), setuptools-scm, rewrite or keep ([project]
#                 version_from; nightly resolves "auto" to one of them before the build):
#                 how the project takes the version, see set_project_version.
#   NIGHTLY_VERSION_REASON  why that strategy (logged), when nightly chose it.
#
# Conventions for the project being built:
#   - it is built through pip's PEP 517 front end (any build backend: setuptools,
#     scikit-build-core, meson-python, ...), isolated unless NIGHTLY_BUILD_ISOLATION=0;
#   - its version comes as NIGHTLY_VERSION_FROM says (set_project_version);
#   - it builds CUDA code when USE_CUDA=1, with the toolkit at CUDA_HOME (nvcc on PATH).
# A recipe checks the version of what was built and fails when the project ignored it.

# shellcheck shell=bash
# Written for bash 3.2 too (macOS's /bin/bash, used by the wheel recipe): no mapfile, no
# associative arrays, and empty arrays expanded as ${a[@]+"${a[@]}"} under `set -u`.

NIGHTLY_RECIPES_COMMON="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYHELPER="$NIGHTLY_RECIPES_COMMON/pyhelper.py"

# Each build.sh sets RECIPE (its own name) before sourcing this file: log lines say which
# recipe spoke even when PACKAGE_TYPE is missing or wrong.
RECIPE="${RECIPE:-${PACKAGE_TYPE:-recipe}}"
log() { printf '[%s] %s\n' "$RECIPE" "$*"; }
warn() { printf '[%s] WARNING: %s\n' "$RECIPE" "$*" >&2; }
die() {
    printf '[%s] ERROR: %s\n' "$RECIPE" "$*" >&2
    exit 1
}

# require_env VAR... : fail naming every contract variable that is missing or empty.
require_env() {
    local missing=() var
    for var in "$@"; do
        [[ -n "${!var:-}" ]] || missing+=("$var")
    done
    ((${#missing[@]} == 0)) || die "missing recipe environment: ${missing[*]} (see docs/recipes.md in nightly, the recipe environment)"
}

# init_recipe: checks common to every recipe; sets WORK_DIR (and TMPDIR) up.
init_recipe() {
    require_env PACKAGE_TYPE DESIRED_CUDA BUILD_VERSION SOURCE_DIR OUTPUT_DIR
    [[ "$PACKAGE_TYPE" == "$RECIPE" ]] || warn "PACKAGE_TYPE=$PACKAGE_TYPE, but this is the $RECIPE recipe"
    [[ -d "$SOURCE_DIR" ]] || die "SOURCE_DIR=$SOURCE_DIR is not a folder"
    mkdir -p "$OUTPUT_DIR" 2>/dev/null || true
    [[ -d "$OUTPUT_DIR" && -w "$OUTPUT_DIR" ]] || die "OUTPUT_DIR=$OUTPUT_DIR is not a writable folder"
    # pip, mktemp and compilers fail obscurely when TMPDIR names a folder that is not there.
    if [[ -n "${TMPDIR:-}" ]]; then
        mkdir -p "$TMPDIR" 2>/dev/null || die "TMPDIR=$TMPDIR does not exist and cannot be created"
    fi
    if [[ -z "${WORK_DIR:-}" ]]; then
        WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/nightly-${RECIPE}.XXXXXX")"
        # Our own temporary folder: remove it whatever happens. A WORK_DIR given by the
        # orchestrator is left alone (it decides what to keep for post-mortems).
        trap 'rm -rf "$WORK_DIR"' EXIT
    fi
    mkdir -p "$WORK_DIR"
    export WORK_DIR
    reproducible_flags
    BUILD_NUMBER="${BUILD_NUMBER:-1}"
    export BUILD_NUMBER
    case "$DESIRED_CUDA" in
        cpu | cu[0-9]* | rocm[0-9]* | xpu) ;;
        *) die "DESIRED_CUDA=$DESIRED_CUDA is none of 'cpu', 'cuXY[Z]' (cu92, cu130), 'rocmX.Y' (rocm5.7), 'xpu'" ;;
    esac
    log "building ${PACKAGE_TYPE} python=${DESIRED_PYTHON:-none} cuda=${DESIRED_CUDA} version=${BUILD_VERSION} build=${BUILD_NUMBER} channel=${CHANNEL:-?} date=${NIGHTLY_DATE:-?}"
    log "source ${SOURCE_DIR}; output ${OUTPUT_DIR}; scratch ${WORK_DIR}"
}

# reproducible_flags : no path of this machine in what the compilers write (debug info,
# __FILE__): the work and source folders are mapped to fixed names for C, C++ and CUDA's host
# compiler (through cuda-host-c++, which CUDAHOSTCXX and NVCC_CCBIN name). NIGHTLY_UMASK (the second build of a reproducibility check) sets the umask.
reproducible_flags() {
    [[ -n "${NIGHTLY_UMASK:-}" ]] && umask "$NIGHTLY_UMASK"
    local opt=-fdebug-prefix-map map="" dir to
    # -ffile-prefix-map (gcc >= 8, clang >= 10) maps __FILE__ too; older ones debug info only.
    # Preprocessing only: the compiler still rejects an option it does not know, and the
    # compiler cache takes no note of it (no miss counted against the build).
    if "${CC:-cc}" -ffile-prefix-map=/a=/b -E -x c /dev/null -o /dev/null >/dev/null 2>&1; then
        opt=-ffile-prefix-map
    fi
    for dir in "$WORK_DIR" "$SOURCE_DIR"; do
        # Flags are split into words by every build system: a folder whose path holds white
        # space cannot be named in them, so it is left unmapped (and said so).
        if [[ "$dir" =~ [[:space:]] ]]; then
            warn "not mapping $dir in debug info and __FILE__ (its path has white space): packages may carry it"
            continue
        fi
        to=/nightly/work
        [[ "$dir" == "$SOURCE_DIR" ]] && to=/nightly/source
        map+="${map:+ }$opt=$dir=$to"
    done
    [[ -n "$map" ]] || return 0
    PREFIX_MAP="$map"
    export CFLAGS="${CFLAGS:+$CFLAGS }$map" CXXFLAGS="${CXXFLAGS:+$CXXFLAGS }$map"
    # CUDA's host compiler takes the map from nightly's wrapper, not from nvcc's arguments
    # (-Xcompiler=...): those name this build's folder, and the compiler cache hashes them,
    # so a kernel compiled for one Python was never found for another (cuda-host-c++).
    if [[ "$NIGHTLY_RECIPES_COMMON" =~ [[:space:]] ]]; then  # not a word in a command line
        export CUDAFLAGS="${CUDAFLAGS:+$CUDAFLAGS }-Xcompiler=${map// /,}"
    else
        if [[ "${NIGHTLY_CUDA_HOST_CXX+set}" != set ]]; then
            export NIGHTLY_CUDA_HOST_CXX="${CUDAHOSTCXX:-${NVCC_CCBIN:-}}"
        fi
        export NIGHTLY_CUDA_HOST_FLAGS="$map" CUDAHOSTCXX="$NIGHTLY_RECIPES_COMMON/cuda-host-c++"
        export NVCC_CCBIN="$CUDAHOSTCXX"
    fi
    [[ -n "${SOURCE_DATE_EPOCH:-}" ]] && log "SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH (${NIGHTLY_SOURCE_DATE_ORIGIN:-given}); $opt for the work and source folders"
    return 0
}

# python_build_flags : setuptools takes CFLAGS and CXXFLAGS from the environment *instead
# of* the interpreter's own (-O3 -DNDEBUG -Wall ...: without them an extension is built
# unoptimised, with its asserts, and zig's cc adds its debug-mode sanitizer runtime). So when
# they hold nothing but reproducible_flags' mapping, a Python build gets it through CPPFLAGS
# instead (setuptools and meson add it to their C and C++ flags) and CMAKE_ARGS (CMake through
# scikit-build-core, which ignores CPPFLAGS). CFLAGS a build was given stay as they are.
python_build_flags() {
    [[ -n "${PREFIX_MAP:-}" && "${CFLAGS:-}" == "$PREFIX_MAP" && "${CXXFLAGS:-}" == "$PREFIX_MAP" ]] || return 0
    unset CFLAGS CXXFLAGS
    export CPPFLAGS="${CPPFLAGS:+$CPPFLAGS }$PREFIX_MAP"
    export CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }'-DCMAKE_C_FLAGS=$PREFIX_MAP' '-DCMAKE_CXX_FLAGS=$PREFIX_MAP'"
}

# set_project_version VERSION : tells the project's build which version to give its package,
# the way NIGHTLY_VERSION_FROM ([project] version_from) says the project reads it:
#   env             BUILD_VERSION and its aliases PYTORCH_BUILD_VERSION and
#                   OVERRIDE_PACKAGE_VERSION (PyTorch and its domain libraries read these)
#   setuptools-scm  SETUPTOOLS_SCM_PRETEND_VERSION and the per-distribution
#                   SETUPTOOLS_SCM_PRETEND_VERSION_FOR_<NAME> (NAME: PROJECT_NAME upper-cased,
#                   runs of "-", "_" and "." as "_", as setuptools-scm spells it)
#   rewrite         nothing: the project builds its own version and build_python_wheel
#                   rewrites the wheel to VERSION afterwards (rewrite_wheel.py)
#   keep            nothing: the project builds its own version (the orchestrator then
#                   expects [project] base_version, and check_wheel_version checks it)
set_project_version() {
    local from="${NIGHTLY_VERSION_FROM:-env}" dist
    [[ -n "${NIGHTLY_VERSION_REASON:-}" ]] && log "version strategy: $from ($NIGHTLY_VERSION_REASON)"
    case "$from" in
        env)
            export BUILD_VERSION="$1" PYTORCH_BUILD_VERSION="$1" OVERRIDE_PACKAGE_VERSION="$1"
            ;;
        setuptools-scm)
            export SETUPTOOLS_SCM_PRETEND_VERSION="$1"
            if [[ -n "${PROJECT_NAME:-}" ]]; then
                dist="$(printf '%s' "$PROJECT_NAME" | tr '[:lower:]' '[:upper:]' | tr -s -- '-_.' '___')"
                export "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_${dist}=$1"
                log "version $1 through SETUPTOOLS_SCM_PRETEND_VERSION(_FOR_${dist})"
            fi
            ;;
        keep | rewrite)
            # The aliases would change what a project that reads them builds: unset them.
            unset PYTORCH_BUILD_VERSION OVERRIDE_PACKAGE_VERSION
            if [[ "$from" == keep ]]; then
                log "version: the project's own (version_from = keep), expected $1"
            else
                log "version: the project's own, rewritten to $1 after the build (version_from = rewrite)"
            fi
            ;;
        *) die "NIGHTLY_VERSION_FROM=$from is none of env, setuptools-scm, rewrite, keep ([project] version_from)" ;;
    esac
}

# is_cuda_build : true for a CUDA build (DESIRED_CUDA=cuXYZ).
is_cuda_build() { [[ "$DESIRED_CUDA" == cu[0-9]* ]]; }

# is_rocm_build : true for a ROCm build (DESIRED_CUDA=rocmX.Y; PyTorch's spelling).
is_rocm_build() { [[ "$DESIRED_CUDA" == rocm[0-9]* ]]; }

# cuda_release : CUDA_VERSION, else derived from DESIRED_CUDA (cu130 -> 13.0, cu92 -> 9.2).
cuda_release() {
    if [[ -n "${CUDA_VERSION:-}" ]]; then
        echo "$CUDA_VERSION"
    else
        local digits="${DESIRED_CUDA#cu}"
        echo "${digits%?}.${digits: -1}"
    fi
}

# nvcc_release DIR : the release (13.0) of DIR/bin/nvcc, or nothing.
nvcc_release() {
    [[ -x "$1/bin/nvcc" ]] || return 0
    "$1/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n1
}

# setup_cuda : for CUDA builds find the toolkit, export CUDA_HOME, PATH, USE_CUDA=1;
# for CPU builds export USE_CUDA=0 so a project that defaults to CUDA does not pick
# up a toolkit that happens to be installed.
setup_cuda() {
    if ! is_cuda_build; then
        export USE_CUDA=0
        return 0
    fi
    local want candidates=() dir got looked=()
    want="$(cuda_release)"
    if [[ -n "${CUDA_HOME:-}" ]]; then
        candidates=("$CUDA_HOME")
    else
        candidates=("/usr/local/cuda-$want" /usr/local/cuda)
    fi
    for dir in "${candidates[@]}"; do
        got="$(nvcc_release "$dir")"
        if [[ -z "$got" ]]; then
            looked+=("$dir/bin/nvcc (not there)")
        elif [[ "$got" != "$want" ]]; then
            looked+=("$dir/bin/nvcc (release $got)")
        else
            export CUDA_HOME="$dir" CUDA_PATH="$dir" USE_CUDA=1
            export PATH="$CUDA_HOME/bin:$PATH"
            log "CUDA $want toolkit at $CUDA_HOME"
            return 0
        fi
    done
    die "no CUDA $want toolkit for DESIRED_CUDA=$DESIRED_CUDA; looked for: ${looked[*]}. Set CUDA_HOME to the toolkit root."
}

# find_python : sets PYTHON to an interpreter that is DESIRED_PYTHON, or fails saying
# where it looked.
find_python() {
    require_env DESIRED_PYTHON
    local desired="$DESIRED_PYTHON" xy suffix nodot candidates=() cand looked=() why about=""
    if [[ ! "$desired" =~ ^([0-9]+)\.([0-9]+)([a-z]*)$ ]]; then
        die "DESIRED_PYTHON=$desired is not of the form X.Y with an optional ABI suffix (3.11, 3.6m, 2.7mu)"
    fi
    xy="${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
    nodot="${BASH_REMATCH[1]}${BASH_REMATCH[2]}"
    suffix="${BASH_REMATCH[3]}"
    if [[ -n "${PYTHON:-}" ]]; then
        # The orchestrator chose it: a wrong one is its mistake, not something to work around.
        [[ -x "$PYTHON" ]] || die "PYTHON=$PYTHON is not an executable"
        why="$("$PYTHON" "$PYHELPER" check-interp "$desired" 2>&1)" ||
            die "PYTHON=$PYTHON does not match DESIRED_PYTHON=$desired: $why"
        about=$why
    else
        if [[ -n "$suffix" ]]; then
            candidates+=("/opt/python/cp${nodot}-cp${nodot}${suffix}/bin/python")
        else
            # manylinux names 3.6/3.7 cp36m and 2.7 cp27mu/cp27m: accept those for a bare X.Y.
            candidates+=("/opt/python/cp${nodot}-cp${nodot}/bin/python"
                "/opt/python/cp${nodot}-cp${nodot}m/bin/python"
                "/opt/python/cp${nodot}-cp${nodot}mu/bin/python")
        fi
        cand="$(command -v "python${xy}" 2>/dev/null || true)"
        candidates+=("${cand:-python${xy} on PATH}")
        for cand in python3 python; do
            local p
            p="$(command -v "$cand" 2>/dev/null || true)"
            candidates+=("${p:-$cand on PATH}")
        done
        PYTHON=""
        for cand in "${candidates[@]}"; do
            if [[ ! -x "$cand" || "$cand" != /* ]]; then
                looked+=("$cand (not found)")
                continue
            fi
            if why="$("$cand" "$PYHELPER" check-interp "$desired" 2>&1)"; then
                PYTHON="$cand" about=$why
                break
            fi
            looked+=("$cand (${why})")
        done
        if [[ -z "$PYTHON" ]]; then
            printf '[%s] ERROR: no interpreter for DESIRED_PYTHON=%s. Looked for:\n' "$RECIPE" "$desired" >&2
            printf '  - %s\n' "${looked[@]}" >&2
            printf 'Set PYTHON to the interpreter, or install it.\n' >&2
            exit 1
        fi
    fi
    export PYTHON
    log "interpreter: $about"  # check-interp's description of the one it accepted
    # Its version as setup_build_venv compares it (312 for 3.12), known without asking it.
    PYTHON_MINOR=$((${xy%%.*} * 100 + ${xy#*.})) PYTHON_MINOR_OF="$PYTHON"
}

# python_nodot : 3.11 -> 311, 3.6m -> 36, 2.7mu -> 27 (for build strings).
python_nodot() {
    local xy="${DESIRED_PYTHON%%[a-z]*}"
    echo "${xy/./}"
}

# copy_source DEST : a writable copy of SOURCE_DIR (which is read-only: setuptools and
# CMake write build/, *.egg-info and generated files into the tree they build).
copy_source() {
    local dest="$1"
    rm -rf "$dest"
    mkdir -p "$dest"
    # -R, not -a: keep neither the read-only modes nor the owner of the original.
    cp -R "$SOURCE_DIR/." "$dest/"
    chmod -R u+w "$dest"
    # Build leftovers from a developer's tree would be picked up by setuptools.
    rm -rf "$dest/build" "$dest/dist"
}

# The build venv, its build requirements and pip's build of the wheel: build_isolated,
# setup_build_venv, stable_build_requirements, build_wheel.
# shellcheck source-path=SCRIPTDIR source=buildenv.sh
source "$NIGHTLY_RECIPES_COMMON/buildenv.sh"

# wheel_field WHEEL KEY : name, version, python_tag, abi_tag or platform_tag of WHEEL.
wheel_field() {
    "$BUILD_PYTHON" "$PYHELPER" wheel-info "$1" | sed -n "s/^$2=//p"
}

# check_wheel_version WHEEL EXPECTED : fail if the wheel's version is not EXPECTED, naming
# the setting that decides how the project gets its version.
check_wheel_version() {
    local got from="${NIGHTLY_VERSION_FROM:-env}" fix
    got="$(wheel_field "$1" version)"
    # The same spelling is the same version; else PEP 440 decides, with the base interpreter:
    # it has pip (and so packaging), the isolated build venv has not.
    [[ -n "$got" && "$got" == "$2" ]] && return 0
    "$PYTHON" "$PYHELPER" same-version "$got" "$2" && return 0
    case "$from" in
        env) fix="[project] version_from = \"env\": the project's build must read BUILD_VERSION (or PYTORCH_BUILD_VERSION). If it uses setuptools-scm, set version_from = \"setuptools-scm\"; if it sets its own version, set version_from = \"rewrite\" (or \"auto\", which detects both)" ;;
        setuptools-scm) fix="[project] version_from = \"setuptools-scm\": the project's build did not take SETUPTOOLS_SCM_PRETEND_VERSION; if it does not use setuptools-scm, set version_from = \"env\" or \"keep\"" ;;
        *) fix="[project] version_from = \"keep\" expects [project] base_version to be the project's own version: set base_version = \"${got%%+*}\"" ;;
    esac
    die "the wheel has version $got but $2 was expected. $fix"
}

# rewrite_wheel_version VERSION : replaces WHEEL by a copy whose version is VERSION
# (dist-info renamed, METADATA, RECORD regenerated, file renamed).
rewrite_wheel_version() {
    local from stale
    from="$(wheel_field "$WHEEL" version)"
    # Before the rewrite: which of its files hold the old version as a literal (the metadata
    # is all the rewrite changes; a project reading its version from there needs no warning).
    stale="$("$PYTHON" "$NIGHTLY_RECIPES_COMMON/rewrite_wheel.py" --still-says "$WHEEL" "$from" 2>/dev/null | head -n 3 | tr '\n' ' ')"
    mkdir -p "$WORK_DIR/rewritten"
    WHEEL="$("$PYTHON" "$NIGHTLY_RECIPES_COMMON/rewrite_wheel.py" "$WHEEL" "$1" "$WORK_DIR/rewritten")" ||
        die "rewriting the wheel's version $from to $1 failed (output above)"
    log "rewrote the wheel's version $from to $1: $(basename "$WHEEL")"
    [[ -z "$stale" ]] ||
        warn "a version compiled into the code still says $from (in ${stale% }); only the package metadata says $1"
}

# build_python_wheel [--no-local-version] : the part manywheel, wheel and conda share.
# Finds the interpreter and the toolkit, builds the project's wheel as PACKAGE_VERSION
# (--no-local-version: BUILD_VERSION as it is, for conda, whose versions have no local part)
# and sets WHEEL to its path in WORK_DIR.
build_python_wheel() {
    # PACKAGE_VERSION: the version nightly decided for this build's package (+cuXYZ for CUDA
    # wheels); a recipe run by hand without it builds BUILD_VERSION as it is.
    local version="${PACKAGE_VERSION:-$BUILD_VERSION}" src="$WORK_DIR/src"
    [[ "${1:-}" == --no-local-version ]] && version="$BUILD_VERSION"
    find_python
    setup_cuda
    set_project_version "$version"
    copy_source "$src"
    setup_build_venv "$src"
    python_build_flags
    local ldshared
    # The interpreter's own -Wl,-rpath (a copied interpreter's LDFLAGS) must not become the
    # extensions' RUNPATH.
    if ldshared="$("$PYTHON" "$PYHELPER" ldshared-without-rpath 2>/dev/null)"; then
        export LDSHARED="$ldshared"
        log "LDSHARED without the interpreter's rpath: $LDSHARED"
    fi
    log "building the wheel of $SOURCE_DIR as version $version"
    WHEEL="$(build_wheel "$src" "$WORK_DIR/dist")"
    [[ "${NIGHTLY_VERSION_FROM:-env}" == rewrite ]] && rewrite_wheel_version "$version"
    check_wheel_version "$WHEEL" "$version"
    log "built $(basename "$WHEEL")"
}

# deliver FILE... : copies finished packages into OUTPUT_DIR, readable by everyone.
deliver() {
    local f
    for f in "$@"; do
        cp "$f" "$OUTPUT_DIR/"
        chmod 0644 "$OUTPUT_DIR/$(basename "$f")"
        log "package: $OUTPUT_DIR/$(basename "$f") ($(wc -c <"$f") bytes)"
    done
}
