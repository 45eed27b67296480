# Build requirements and the wheel's build, for recipes/common/lib.sh (sourced by it, never
# on its own): the build venv, where its build requirements come from, and pip's PEP 517 build.
# Written for bash 3.2 too, as lib.sh.

# shellcheck shell=bash

# build_isolated : true unless NIGHTLY_BUILD_ISOLATION=0 ([build] isolation = false).
build_isolated() { [[ "${NIGHTLY_BUILD_ISOLATION:-1}" != 0 ]]; }

# setup_build_venv SRC : sets BUILD_PYTHON to a fresh venv of PYTHON in WORK_DIR and BUILD_PIP
# to a one-word command running pip for it (empty when there is no pip at all).
#
# Isolated builds (the default) get their build requirements ([build-system] requires, with
# versions, extras and markers, then what the backend asks for) from the configured index
# (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS; a wheelhouse sets PIP_NO_INDEX too),
# installed into this fresh venv (stable_build_requirements: a path the same every night, for
# the compiler cache); before Python 3.7 pip's own isolated environment gets them.
# Builds without isolation (offline images) see the interpreter's own packages
# (--system-site-packages), and buildreqs.py checks every requirement against them first,
# failing with the list of what is missing or too old.
#
# The venv is made without its own pip (ensurepip costs seconds per build): pip comes from
# the system site, or is the base interpreter's pip driving the venv (pip >= 22.3 has
# --python), and only failing both does the venv get its own through ensurepip.
setup_build_venv() {
    local src="$1" venv="$WORK_DIR/build-venv" system_site=() pip_cmd=()
    BUILD_CONFIG_SETTINGS=()
    build_isolated || system_site=(--system-site-packages)
    rm -rf "$venv"
    if "$PYTHON" -c 'import venv' >/dev/null 2>&1; then
        "$PYTHON" -m venv --without-pip ${system_site[@]+"${system_site[@]}"} "$venv" >"$WORK_DIR/venv.log" 2>&1 ||
            { cat "$WORK_DIR/venv.log" >&2; die "cannot create a virtual environment with $PYTHON -m venv"; }
        BUILD_PYTHON="$venv/bin/python"
        if "$BUILD_PYTHON" -m pip --version >/dev/null 2>&1; then
            pip_cmd=("$BUILD_PYTHON" -m pip)
        elif "$PYTHON" -m pip --python "$BUILD_PYTHON" --version >/dev/null 2>&1; then
            pip_cmd=("$PYTHON" -m pip --python "$BUILD_PYTHON")
        elif "$BUILD_PYTHON" -m ensurepip >>"$WORK_DIR/venv.log" 2>&1; then
            pip_cmd=("$BUILD_PYTHON" -m pip)
        fi
    elif command -v virtualenv >/dev/null 2>&1; then
        # Python 2.7 has no venv module.
        virtualenv -p "$PYTHON" ${system_site[@]+"${system_site[@]}"} "$venv" >"$WORK_DIR/venv.log" 2>&1 ||
            { cat "$WORK_DIR/venv.log" >&2; die "virtualenv -p $PYTHON failed"; }
        BUILD_PYTHON="$venv/bin/python"
        pip_cmd=("$BUILD_PYTHON" -m pip)
    else
        warn "$PYTHON has no venv module and virtualenv is not installed: building with the interpreter itself"
        BUILD_PYTHON="$PYTHON"
        "$PYTHON" -m pip --version >/dev/null 2>&1 && pip_cmd=("$PYTHON" -m pip)
    fi
    BUILD_PIP=""
    if [[ ${#pip_cmd[@]} -gt 0 ]]; then
        # A one-word command, so it can be handed on (the conda recipe's build script uses it).
        # Each word quoted by bash (%q): paths with spaces, tabs or quotes stay one argument.
        BUILD_PIP="$WORK_DIR/build-pip"
        printf '#!/bin/bash\nexec%s --disable-pip-version-check "$@"\n' "$(printf ' %q' "${pip_cmd[@]}")" >"$BUILD_PIP"
        chmod +x "$BUILD_PIP"
    fi
    export BUILD_PYTHON BUILD_PIP
    if [[ -n "${NIGHTLY_WHEELHOUSE:-}" ]]; then
        [[ -d "$NIGHTLY_WHEELHOUSE" ]] || die "NIGHTLY_WHEELHOUSE=$NIGHTLY_WHEELHOUSE is not a folder (the night's wheelhouse of build requirements)"
        # The night's wheelhouse is the only source of build requirements: no index at all.
        export PIP_NO_INDEX=1 PIP_FIND_LINKS="$NIGHTLY_WHEELHOUSE"
        log "build requirements from the wheelhouse $NIGHTLY_WHEELHOUSE (no index)"
    fi
    if build_isolated; then
        [[ -n "$BUILD_PIP" ]] || die "$PYTHON has no pip, which isolated builds need; install pip, or set [build] isolation = false"
        modern_build_pip
        local source="the index of the pip configuration"
        [[ -n "${PIP_INDEX_URL:-}" ]] && source="$PIP_INDEX_URL"
        [[ -n "${NIGHTLY_WHEELHOUSE:-}" ]] && source="the wheelhouse"
        # buildreqs.py runs on 3.7 and newer; older interpreters keep pip's own isolation.
        if "$BUILD_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 7))' 2>/dev/null; then
            stable_build_requirements "$src" "$source"
            return 0
        fi
        log "isolated build: pip installs the build requirements from $source"
        return 0
    fi
    if "$BUILD_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 8))' 2>/dev/null; then
        local why
        why="$(cd "$src" && "$BUILD_PYTHON" "$NIGHTLY_RECIPES_COMMON/buildreqs.py" check "$src" 2>&1)" ||
            { printf '%s\n' "$why" >&2; die "build requirements not met without isolation (list above)"; }
        log "$why"
    else
        warn "$BUILD_PYTHON is older than 3.8: its build requirements are not checked before the build"
    fi
}

# modern_build_pip : a build venv whose pip predates --config-settings (22.1; Debian
# bullseye's Python 3.9 brings pip 20.3) gets a current one from the same index as the build
# requirements; where that fails the build goes on with the old pip, without config settings.
modern_build_pip() {
    local v major minor
    v="$("$BUILD_PIP" --version 2>/dev/null | awk '{print $2}')"
    IFS=. read -r major minor _ <<<"${v:-0.0}"
    ((major > 22 || (major == 22 && minor >= 1))) 2>/dev/null && return 0
    log "the build venv's pip $v predates --config-settings: installing pip>=23.1 into it"
    "$BUILD_PIP" install -q "pip>=23.1" >&2 || warn "could not install pip>=23.1 into the build venv: building with pip $v"
}

# build_requirements COMMAND [ARG...] : sets reqs to what `buildreqs.py COMMAND SRC ARG...`
# prints, one requirement a line; fails as it does. Reads src, plain, hooks_python and reqs
# of its caller, stable_build_requirements (bash's scoping: arrays cannot be passed).
build_requirements() {
    local out line command="$1"
    shift
    out="$(cd "$src" && ${plain[@]+"${plain[@]}"} "$hooks_python" "$NIGHTLY_RECIPES_COMMON/buildreqs.py" "$command" "$src" "$@")" || return 1
    reqs=()
    while IFS= read -r line; do
        [[ -n "$line" ]] && reqs+=("$line")
    done <<<"$out"
    return 0
}

# install_build_requirements WHAT : pip installs the caller's reqs (if any) into the build venv.
install_build_requirements() {
    ((${#reqs[@]})) || return 0
    ${plain[@]+"${plain[@]}"} "$BUILD_PIP" install -q "${reqs[@]}" >&2 ||
        die "installing $1 failed (output above)"
}

# stable_build_requirements SRC SOURCE : an isolated build whose build requirements pip
# would install into a folder of a random name (pip-build-env-XXXX), which every compile of a
# header from them names (-I) and the compiler cache hashes: no such object could hit on
# another night. So the project's build requirements ([build-system] requires, then what its
# backend asks for) are installed from SOURCE into the build's own fresh venv, at a path that
# is the same every night (WORK_DIR/build-venv), and the wheel is built there without
# isolation (and without an index), its scripts (cmake, ninja, cython) first on PATH as pip's
# isolation puts them. scikit-build-core and meson-python get a build folder of a fixed name
# for the same reason (they default to a random temporary one).
#
# A cross build (nightly's cross environment: the target's sysconfigdata on PYTHONPATH,
# _PYTHON_HOST_PLATFORM) needs this anyway, pip's isolation replacing PYTHONPATH: its
# requirements are installed for this machine, the cross variables unset.
stable_build_requirements() {
    local src="$1" source="$2" hooks_python="$PYTHON" backend
    local -a plain=() reqs=()
    [[ -n "${NIGHTLY_CROSS_PYTHON:-}" ]] && plain=(env -u _PYTHON_HOST_PLATFORM -u _PYTHON_SYSCONFIGDATA_NAME -u PYTHONPATH)
    # buildreqs.py needs a TOML parser (tomllib, else pip's copy) and pyproject_hooks (pip's
    # copy): the interpreter with pip runs it, the fresh venv has none before 3.11.
    "$hooks_python" -c 'import pip' >/dev/null 2>&1 || hooks_python="$BUILD_PYTHON"
    build_requirements list || die "reading the build requirements of the project failed (output above)"
    # The cross build's old rule: wheel for setuptools' bdist_wheel whatever the version.
    [[ -n "${NIGHTLY_CROSS_PYTHON:-}" ]] && reqs+=(wheel)
    if [[ -n "${NIGHTLY_CROSS_PYTHON:-}" ]]; then
        log "cross build for ${NIGHTLY_ARCH:-?} (Python $NIGHTLY_CROSS_PYTHON): build requirements for this machine from $source: ${reqs[*]:-}"
    else
        log "isolated build: build requirements from $source into $(dirname "$(dirname "$BUILD_PYTHON")"), a path the same every night (compiler cache): ${reqs[*]:-}"
    fi
    install_build_requirements "the build requirements"
    # The hooks run in the build venv (the static requirements there), called from hooks_python.
    build_requirements dynamic "$BUILD_PYTHON" || die "the build backend failed in get_requires_for_build_wheel (output above)"
    ((${#reqs[@]} == 0)) || log "the build backend asks for: ${reqs[*]}"
    install_build_requirements "what the build backend asks for"
    PATH="$(dirname "$BUILD_PYTHON"):$PATH"
    export PATH
    backend="$(cd "$src" && "$hooks_python" "$NIGHTLY_RECIPES_COMMON/buildreqs.py" backend "$src" 2>/dev/null)" || backend=""
    case "$backend" in
        scikit_build_core.*) export SKBUILD_BUILD_DIR="${SKBUILD_BUILD_DIR:-$WORK_DIR/backend-build}" ;;
        mesonpy) BUILD_CONFIG_SETTINGS=("--config-settings=build-dir=$WORK_DIR/backend-build") ;;
    esac
    NIGHTLY_BUILD_ISOLATION=0
}

# build_wheel SRC DIST : builds SRC into a wheel in DIST through pip's PEP 517 front end
# (isolated unless NIGHTLY_BUILD_ISOLATION=0); prints its path.
build_wheel() {
    local src="$1" dist="$2" wheels=() args
    mkdir -p "$dist"
    if [[ -n "$BUILD_PIP" ]]; then
        args=(wheel --no-deps -w "$dist" -v)
        build_isolated || args+=(--no-build-isolation --no-index)
        args+=(${BUILD_CONFIG_SETTINGS[@]+"${BUILD_CONFIG_SETTINGS[@]}"})
        (cd "$src" && "$BUILD_PIP" "${args[@]}" .) >&2 ||
            die "building the wheel failed (pip wheel, output above)"
    else
        (cd "$src" && "$BUILD_PYTHON" setup.py bdist_wheel -d "$dist") >&2 ||
            die "building the wheel failed (setup.py bdist_wheel, output above)"
    fi
    shopt -s nullglob
    wheels=("$dist"/*.whl)
    shopt -u nullglob
    ((${#wheels[@]} == 1)) || die "expected one wheel in $dist, found ${#wheels[@]}: ${wheels[*]:-none}"
    echo "${wheels[0]}"
}
