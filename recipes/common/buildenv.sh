# Build requirements and the wheel's build, for recipes/common/lib.sh (sourced by it, never
# on its own): the build venv, where its build requirements come from, and pip's PEP 517 build.
# Written for bash 3.2 too, as lib.sh.

# shellcheck shell=bash

# build_isolated : true unless NIGHTLY_BUILD_ISOLATION=0 ([build] isolation = false).
build_isolated() { [[ "${NIGHTLY_BUILD_ISOLATION:-1}" != 0 ]]; }

# setup_build_venv SRC : sets BUILD_PYTHON to the venv of PYTHON in WORK_DIR (fresh, or the
# one kept from an earlier night: kept_build_venv) and BUILD_PIP to a one-word command running
# pip for it (empty when there is no pip at all).
#
# Isolated builds (the default) get their build requirements ([build-system] requires, with
# versions, extras and markers, then what the backend asks for) from the configured index
# (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS; a wheelhouse sets PIP_NO_INDEX too),
# installed into this venv by uv or pip (choose_installer) (stable_build_requirements: a path
# the same every night, for the compiler cache); before Python 3.7 pip's own isolated
# environment gets them.
# Builds without isolation (offline images) see the interpreter's own packages
# (--system-site-packages), and buildreqs.py checks every requirement against them first,
# failing with the list of what is missing or too old.
#
# The venv is made without its own pip (ensurepip costs seconds per build): pip comes from
# the system site, or is the base interpreter's pip driving the venv (pip >= 22.3 has
# --python), and only failing both does the venv get its own through ensurepip.
setup_build_venv() {
    local src="$1" venv="$WORK_DIR/build-venv" system_site=()
    BUILD_CONFIG_SETTINGS=()
    build_isolated || system_site=(--system-site-packages)
    if [[ -n "${NIGHTLY_WHEELHOUSE:-}" ]]; then
        [[ -d "$NIGHTLY_WHEELHOUSE" ]] || die "NIGHTLY_WHEELHOUSE=$NIGHTLY_WHEELHOUSE is not a folder (the night's wheelhouse of build requirements)"
        # The night's wheelhouse is the only source of build requirements: no index at all.
        export PIP_NO_INDEX=1 PIP_FIND_LINKS="$NIGHTLY_WHEELHOUSE"
        log "build requirements from the wheelhouse $NIGHTLY_WHEELHOUSE (no index)"
    fi
    INSTALLER=pip UV_ARGS=() UV_ENV=() BUILD_ENV_KEY="" BUILD_ENV_REUSED=0 FRONTEND=pip FRONTEND_WHY=""
    # find_python's check-interp told it already (PYTHON_MINOR_OF), else the interpreter is asked.
    if [[ "${PYTHON_MINOR_OF:-}" != "$PYTHON" ]]; then
        PYTHON_MINOR="$("$PYTHON" -c 'import sys; print(sys.version_info[0] * 100 + sys.version_info[1])' 2>/dev/null)" || PYTHON_MINOR=0
    fi
    if build_isolated && ((PYTHON_MINOR >= 307)); then
        choose_installer
        kept_build_venv "$src" "$venv" && BUILD_ENV_REUSED=1
    fi
    if ((BUILD_ENV_REUSED)); then
        BUILD_PYTHON="$venv/bin/python"
    elif "$PYTHON" -c 'import venv' >/dev/null 2>&1; then
        rm -rf "$venv"
        "$PYTHON" -m venv --without-pip ${system_site[@]+"${system_site[@]}"} "$venv" >"$WORK_DIR/venv.log" 2>&1 ||
            { cat "$WORK_DIR/venv.log" >&2; die "cannot create a virtual environment with $PYTHON -m venv"; }
        BUILD_PYTHON="$venv/bin/python"
    elif command -v virtualenv >/dev/null 2>&1; then
        # Python 2.7 has no venv module.
        rm -rf "$venv"
        virtualenv -p "$PYTHON" ${system_site[@]+"${system_site[@]}"} "$venv" >"$WORK_DIR/venv.log" 2>&1 ||
            { cat "$WORK_DIR/venv.log" >&2; die "virtualenv -p $PYTHON failed"; }
        BUILD_PYTHON="$venv/bin/python"
    else
        warn "$PYTHON has no venv module and virtualenv is not installed: building with the interpreter itself"
        BUILD_PYTHON="$PYTHON"
    fi
    build_venv_pip "$venv"
    export BUILD_PYTHON BUILD_PIP
    if build_isolated; then
        [[ -n "$BUILD_PIP" ]] || die "$PYTHON has no pip, which isolated builds need; install pip, or set [build] isolation = false"
        modern_build_pip
        local source="the index of the pip configuration"
        [[ -n "${PIP_INDEX_URL:-}" ]] && source="$PIP_INDEX_URL"
        [[ -n "${NIGHTLY_WHEELHOUSE:-}" ]] && source="the wheelhouse"
        # buildreqs.py runs on 3.7 and newer; older interpreters keep pip's own isolation.
        # (BUILD_PYTHON is PYTHON or a venv of it: the same version)
        if ((PYTHON_MINOR >= 307)); then
            stable_build_requirements "$src" "$source"
            return 0
        fi
        log "isolated build: pip installs the build requirements from $source"
        return 0
    fi
    if ((PYTHON_MINOR >= 308)); then
        local why
        why="$(cd "$src" && "$BUILD_PYTHON" "$NIGHTLY_RECIPES_COMMON/buildreqs.py" check "$src" 2>&1)" ||
            { printf '%s\n' "$why" >&2; die "build requirements not met without isolation (list above)"; }
        log "$why"
        # The image's own pypa/build, where it has one (nothing is installed into its site).
        # From the empty folder build_wheel starts it in (a project's build.py is not it).
        mkdir -p "$WORK_DIR/frontend-cwd"
        if (cd "$WORK_DIR/frontend-cwd" && "$BUILD_PYTHON" -c 'from build import ProjectBuilder') >/dev/null 2>&1; then
            FRONTEND=build
        else
            FRONTEND_WHY="$BUILD_PYTHON has no pypa/build (the build runs without isolation on the image's own packages)"
        fi
    else
        warn "$BUILD_PYTHON is older than 3.8: its build requirements are not checked before the build"
        FRONTEND_WHY="$BUILD_PYTHON is older than 3.8, which pypa/build needs"
    fi
}

# build_venv_pip VENV : BUILD_PIP for BUILD_PYTHON (see setup_build_venv), empty without pip.
build_venv_pip() {
    local venv="$1" pip_cmd=() wheel found=()
    shopt -s nullglob
    found=("$venv"/lib/python*/site-packages/pip-*.dist-info)
    shopt -u nullglob
    if [[ "$INSTALLER" == uv && ${#found[@]} -eq 0 && "$BUILD_PYTHON" != "$PYTHON" ]] &&
        wheel="$("$PYTHON" "$NIGHTLY_RECIPES_COMMON/envkey.py" pip-wheel 2>/dev/null)" &&
        "$NIGHTLY_UV" pip install --no-config -q --python "$BUILD_PYTHON" --link-mode copy --no-index "$wheel" >&2; then
        # The pip python -m venv would have put there (the interpreter's ensurepip wheel,
        # offline): the wheel's front end runs in the venv, not re-executed by another pip.
        found=("$wheel")
    fi
    if ((${#found[@]})) && [[ "$BUILD_PYTHON" != "$PYTHON" ]]; then
        # Known by its files: running pip only to ask costs a second.
        pip_cmd=("$BUILD_PYTHON" -m pip)
    elif [[ "$BUILD_PYTHON" == "$PYTHON" ]]; then
        "$PYTHON" -m pip --version >/dev/null 2>&1 && pip_cmd=("$PYTHON" -m pip)
    elif "$BUILD_PYTHON" -m pip --version >/dev/null 2>&1; then
        pip_cmd=("$BUILD_PYTHON" -m pip)
    elif "$PYTHON" -m pip --python "$BUILD_PYTHON" --version >/dev/null 2>&1; then
        pip_cmd=("$PYTHON" -m pip --python "$BUILD_PYTHON")
    elif "$BUILD_PYTHON" -m ensurepip >>"$WORK_DIR/venv.log" 2>&1; then
        pip_cmd=("$BUILD_PYTHON" -m pip)
    fi
    BUILD_PIP=""
    if [[ ${#pip_cmd[@]} -gt 0 ]]; then
        # A one-word command, so it can be handed on (the conda recipe's build script uses it).
        # Each word quoted by bash (%q): paths with spaces, tabs or quotes stay one argument.
        BUILD_PIP="$WORK_DIR/build-pip"
        printf '#!/bin/bash\nexec%s --disable-pip-version-check "$@"\n' "$(printf ' %q' "${pip_cmd[@]}")" >"$BUILD_PIP"
        chmod +x "$BUILD_PIP"
    fi
}

# choose_installer : INSTALLER (uv or pip) for the build requirements, and UV_ARGS / UV_ENV
# (pip's configuration handed on to uv: envkey.py installer). uv comes from nightly
# (NIGHTLY_UV); pip stays where uv is missing, the interpreter predates 3.8, [build]
# installer = "pip", or pip is configured in a way uv cannot be given. One log line says which.
choose_installer() {
    local out line n=0 reason="uv not considered"
    INSTALLER=pip UV_ARGS=() UV_ENV=()
    if out="$("$PYTHON" "$NIGHTLY_RECIPES_COMMON/envkey.py" installer 2>&1)"; then
        while IFS= read -r line; do
            n=$((n + 1))
            if ((n == 1)); then INSTALLER="$line"
            elif ((n == 2)); then reason="$line"
            elif ((n == 3)) && [[ "$line" == SSL_CERT_FILE=* ]]; then UV_ENV=("$line")
            else UV_ARGS+=("$line")
            fi
        done <<<"$out"
    else
        reason="the installer could not be chosen: $out"
    fi
    if [[ "$INSTALLER" == uv ]]; then
        log "installer: uv ($NIGHTLY_UV) installs the build requirements"
    else
        INSTALLER=pip
        log "installer: pip ($reason)"
    fi
}

# kept_build_venv SRC VENV : true when VENV, kept from an earlier night (the runner puts it
# back: nightly/builds/area/buildenv.py, NIGHTLY_BUILD_ENV_REUSE=1), has the key this build
# computes (envkey.py check, into BUILD_ENV_KEY: a file the fill's end copies into the venv);
# else one log line says why it is rebuilt. What the backend asks for is checked after
# (stable_build_requirements).
kept_build_venv() {
    local src="$1" venv="$2" why hooks_python="$PYTHON" installer="$INSTALLER"
    local -a plain=() reqs=()
    [[ "${NIGHTLY_BUILD_ENV_REUSE:-0}" == 1 ]] || return 1
    [[ -n "${NIGHTLY_CROSS_PYTHON:-}" ]] && plain=(env -u _PYTHON_HOST_PLATFORM -u _PYTHON_SYSCONFIGDATA_NAME -u PYTHONPATH)
    [[ "$INSTALLER" == uv ]] && installer="uv $("$NIGHTLY_UV" --version 2>/dev/null)"
    build_requirements list 2>/dev/null || return 1
    [[ -n "${NIGHTLY_CROSS_PYTHON:-}" ]] && reqs+=(wheel)
    frontend_wanted && reqs+=(build)
    BUILD_ENV_KEY="$WORK_DIR/build-env-key"
    why="$("$PYTHON" "$NIGHTLY_RECIPES_COMMON/envkey.py" check "$venv/$BUILD_ENV_KEY_FILE" "$BUILD_ENV_KEY" \
        "$PYTHON" "$installer" ${reqs[@]+"${reqs[@]}"} 2>&1)"
    case $? in
        0) ;;
        1) ;;
        *) log "build environment: its key could not be computed ($why): a fresh one"; BUILD_ENV_KEY=""; return 1 ;;
    esac
    [[ -z "${BUILD_ENV_REBUILDING:-}" ]] || return 1
    if [[ ! -d "$venv" ]]; then
        log "build environment: none kept from an earlier night: a fresh one in $venv"
        return 1
    fi
    if [[ -z "$why" && -x "$venv/bin/python" ]]; then
        log "build environment: reused $venv (kept from an earlier night, its key unchanged)"
        return 0
    fi
    log "build environment $venv rebuilt: ${why:-its python is missing}"
    rm -rf "$venv"
    return 1
}

# The key of a kept build venv, written last (after a successful fill).
BUILD_ENV_KEY_FILE=.nightly-env-key

# modern_build_pip : a build venv whose pip predates --config-settings (22.1; Debian
# bullseye's Python 3.9 brings pip 20.3) gets a current one from the same index as the build
# requirements; where that fails the build goes on with the old pip, without config settings.
modern_build_pip() {
    local v major minor found=()
    shopt -s nullglob
    found=("$(dirname "$(dirname "$BUILD_PYTHON")")"/lib/python*/site-packages/pip-*.dist-info)
    shopt -u nullglob
    if ((${#found[@]} == 1)) && [[ "$BUILD_PYTHON" != "$PYTHON" ]]; then
        v="${found[0]##*/pip-}"
        v="${v%.dist-info}"
    else
        v="$("$BUILD_PIP" --version 2>/dev/null | awk '{print $2}')"
    fi
    IFS=. read -r major minor _ <<<"${v:-0.0}"
    ((major > 22 || (major == 22 && minor >= 1))) 2>/dev/null && return 0
    log "the build venv's pip $v predates --config-settings: installing pip>=23.1 into it"
    "$BUILD_PIP" install -q "pip>=23.1" >&2 || warn "could not install pip>=23.1 into the build venv: building with pip $v"
}

# build_requirements COMMAND [ARG...] : sets reqs to what `buildreqs.py COMMAND SRC ARG...`
# prints, one requirement a line; fails as it does. Reads src, plain, hooks_python and reqs
# of its caller, stable_build_requirements (bash's scoping: arrays cannot be passed).
build_requirements() {
    local out line command="$1" asked
    shift
    asked="$command|$src|$hooks_python|$*"
    if [[ "$command" == list && "${BUILD_REQS_ASKED:-}" == "$asked" ]]; then
        out="$BUILD_REQS_LISTED"  # the static list again (kept_build_venv asked first)
    else
        out="$(cd "$src" && ${plain[@]+"${plain[@]}"} "$hooks_python" "$NIGHTLY_RECIPES_COMMON/buildreqs.py" "$command" "$src" "$@")" || return 1
        [[ "$command" == list ]] && BUILD_REQS_ASKED="$asked" BUILD_REQS_LISTED="$out"
    fi
    reqs=()
    while IFS= read -r line; do
        [[ -n "$line" ]] && reqs+=("$line")
    done <<<"$out"
    return 0
}

# install_build_requirements WHAT : uv or pip (INSTALLER) installs the caller's reqs (if any)
# into the build venv. uv reads no configuration of its own (--no-config: pip's is handed on
# in UV_ARGS) and copies files from its cache (never a hard link into it).
install_build_requirements() {
    install_requirements || die "installing $1 failed ($INSTALLER, output above)"
}

# install_requirements : install_build_requirements without dying: fails as the installer does.
install_requirements() {
    ((${#reqs[@]})) || return 0
    if [[ "$INSTALLER" == uv ]]; then
        ${plain[@]+"${plain[@]}"} env ${UV_ENV[@]+"${UV_ENV[@]}"} "$NIGHTLY_UV" pip install --no-config -q \
            --python "$BUILD_PYTHON" --link-mode copy ${UV_ARGS[@]+"${UV_ARGS[@]}"} "${reqs[@]}" >&2
        return
    fi
    ${plain[@]+"${plain[@]}"} "$BUILD_PIP" install -q "${reqs[@]}" >&2
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
    local src="$1" source="$2" hooks_python="$PYTHON" backend venv
    local -a plain=() reqs=()
    venv="$(dirname "$(dirname "$BUILD_PYTHON")")"
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
    if ((!BUILD_ENV_REUSED)); then
        # pypa/build, the wheel's front end, goes in with them (one resolve); where it cannot
        # be had (a wheelhouse without it, a conflict) the requirements go in alone, and pip
        # builds the wheel.
        local -a static=(${reqs[@]+"${reqs[@]}"})
        frontend_wanted && reqs+=(build)
        if ! install_requirements; then
            ((${#reqs[@]} > ${#static[@]})) || die "installing the build requirements failed (output above)"
            log "pypa/build could not be installed with the build requirements from $source (output above): the requirements alone"
            reqs=(${static[@]+"${static[@]}"})
            install_build_requirements "the build requirements"
        fi
    fi
    # The hooks run in the build venv (the static requirements there), called from hooks_python.
    build_requirements dynamic "$BUILD_PYTHON" || die "the build backend failed in get_requires_for_build_wheel (output above)"
    ((${#reqs[@]} == 0)) || log "the build backend asks for: ${reqs[*]}"
    if ((BUILD_ENV_REUSED)) && ! grep -qxF "backend asks for: ${reqs[*]:-}" "$venv/$BUILD_ENV_KEY_FILE"; then
        # Asked again of the kept environment: different requirements, a fresh one.
        log "build environment $venv rebuilt: what the build backend asks for changed (now: ${reqs[*]:-nothing})"
        rm -rf "$venv"
        BUILD_ENV_REBUILDING=1 setup_build_venv "$src"
        return 0
    fi
    ((BUILD_ENV_REUSED)) || install_build_requirements "what the build backend asks for"
    if [[ -n "$BUILD_ENV_KEY" ]] && ((!BUILD_ENV_REUSED)); then
        # Written last: a fill that did not finish leaves no key, and the next night rebuilds.
        { cat "$BUILD_ENV_KEY"; printf 'backend asks for: %s\n' "${reqs[*]:-}"; } >"$venv/$BUILD_ENV_KEY_FILE.partial" &&
            mv -f "$venv/$BUILD_ENV_KEY_FILE.partial" "$venv/$BUILD_ENV_KEY_FILE"
    fi
    PATH="$(dirname "$BUILD_PYTHON"):$PATH"
    export PATH
    if ! frontend_wanted; then
        FRONTEND_WHY="$FRONTEND_WHY_NOT"
    elif venv_has build "$venv"; then
        FRONTEND=build
    else
        FRONTEND_WHY="pypa/build is not in the build environment: it could not be installed from $source"
    fi
    backend="$(cd "$src" && "$hooks_python" "$NIGHTLY_RECIPES_COMMON/buildreqs.py" backend "$src" 2>/dev/null)" || backend=""
    case "$backend" in
        scikit_build_core.*) export SKBUILD_BUILD_DIR="${SKBUILD_BUILD_DIR:-$WORK_DIR/backend-build}" ;;
        mesonpy) BUILD_CONFIG_SETTINGS=("--config-settings=build-dir=$WORK_DIR/backend-build") ;;
    esac
    NIGHTLY_BUILD_ISOLATION=0
}

# frontend_wanted : true when pypa/build should build the wheel of this isolated build
# (installed into the build venv with its requirements, and part of its key); else
# FRONTEND_WHY_NOT says why pip does: Python before 3.8 (build's own floor), or a cross
# build (whose front end runs beside the target's sysconfigdata: pip's, as before).
frontend_wanted() {
    FRONTEND_WHY_NOT=""
    if ((${PYTHON_MINOR:-0} < 308)); then
        FRONTEND_WHY_NOT="$PYTHON is older than 3.8, which pypa/build needs"
    elif [[ -n "${NIGHTLY_CROSS_PYTHON:-}" ]]; then
        FRONTEND_WHY_NOT="a cross build"
    fi
    [[ -z "$FRONTEND_WHY_NOT" ]]
}

# venv_has NAME VENV : true when distribution NAME is installed in VENV (by its files: a
# Python started to ask costs a tenth of a second).
venv_has() {
    local found=()
    shopt -s nullglob
    found=("$2"/lib/python*/site-packages/"$1"-[0-9]*.dist-info)
    shopt -u nullglob
    ((${#found[@]}))
}

# build_wheel SRC DIST : builds SRC into a wheel in DIST; prints its path. The front end is
# pypa/build where the build environment is already filled (no isolation) and has it
# (FRONTEND=build): the backend's build_wheel hook alone, no pip start, no metadata step
# (prepare_metadata_for_build_wheel), and no second get_requires_for_build_wheel
# (--skip-dependency-check: stable_build_requirements asked it and installed the answer).
# Else pip's (isolated unless NIGHTLY_BUILD_ISOLATION=0). One log line says which ran.
build_wheel() {
    local src="$1" dist="$2" wheels=() args setting
    mkdir -p "$dist"
    if [[ "$FRONTEND" == build ]] && ! build_isolated; then
        log "front end: pypa/build ($BUILD_PYTHON -m build --wheel --no-isolation --skip-dependency-check)" >&2
        args=(-m build --wheel --no-isolation --skip-dependency-check --outdir "$dist")
        for setting in ${BUILD_CONFIG_SETTINGS[@]+"${BUILD_CONFIG_SETTINGS[@]}"}; do
            args+=("--config-setting=${setting#--config-settings=}")
        done
        # Started from an empty folder: `-m build` imports from the current one first, and a
        # project's own build.py (poetry's build script) must not be taken for the front end.
        # The hooks run in SRC all the same (pyproject_hooks). build prints its progress on
        # stdout: stdout here is the wheel's path alone.
        mkdir -p "$WORK_DIR/frontend-cwd"
        (cd "$WORK_DIR/frontend-cwd" && "$BUILD_PYTHON" "${args[@]}" "$src") >&2 ||
            die "building the wheel failed (pypa/build, output above)"
    elif [[ -n "$BUILD_PIP" ]]; then
        log "front end: pip wheel (${FRONTEND_WHY:-an isolated build: pip installs the build requirements})" >&2
        args=(wheel --no-deps -w "$dist" -v)
        build_isolated || args+=(--no-build-isolation --no-index)
        args+=(${BUILD_CONFIG_SETTINGS[@]+"${BUILD_CONFIG_SETTINGS[@]}"})
        (cd "$src" && "$BUILD_PIP" "${args[@]}" .) >&2 ||
            die "building the wheel failed (pip wheel, output above)"
    else
        log "front end: setup.py bdist_wheel ($PYTHON has no pip)" >&2
        (cd "$src" && "$BUILD_PYTHON" setup.py bdist_wheel -d "$dist") >&2 ||
            die "building the wheel failed (setup.py bdist_wheel, output above)"
    fi
    shopt -s nullglob
    wheels=("$dist"/*.whl)
    shopt -u nullglob
    ((${#wheels[@]} == 1)) || die "expected one wheel in $dist, found ${#wheels[@]}: ${wheels[*]:-none}"
    echo "${wheels[0]}"
}
