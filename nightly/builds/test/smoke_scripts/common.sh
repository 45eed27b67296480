# Shared by the smoke scripts (sourced): a fresh virtual environment with the wheel(s) in
# SOURCE_DIR installed. PYTHON is the interpreter nightly decided (the executor's, or the
# builder image's); without it (an image nightly did not make) one is looked for the way the
# recipes do.
# shellcheck shell=bash

# fresh_venv WHO : sets work (scratch) and vpy (the venv's python); WHO prefixes the lines.
fresh_venv() {
  local who=$1 num cand
  work=${WORK_DIR:-$(mktemp -d)}
  py=${PYTHON:-}
  if [ -z "$py" ]; then
    num=${DESIRED_PYTHON%%[a-z]*}
    if [ "${DESIRED_PYTHON%t}" != "$DESIRED_PYTHON" ]; then
      # Free-threaded: its own ABI's interpreter, never the GIL one of the same version.
      set -- "/opt/python/cp${num/./}-cp${num/./}t/bin/python" "python${num}t"
    else
      set -- "/opt/python/cp${num/./}-cp${num/./}"*/bin/python "python$num" python3
    fi
    for cand in "$@"; do
      if command -v "$cand" >/dev/null 2>&1; then py=$cand; break; fi
    done
  fi
  [ -n "$py" ] || { echo "$who: no interpreter for Python $DESIRED_PYTHON"; exit 1; }
  if [ -n "${NIGHTLY_CROSS_RUN:-}" ]; then
    # A wheel cross-built for another architecture (nightly/images/cross.py): its files
    # unpacked as pip installs them, imported by the target's Python under qemu-user.
    echo "$who: the $NIGHTLY_ARCH wheel under emulation: $NIGHTLY_CROSS_RUN on $(hostname)"
    local plain=(env -u _PYTHON_HOST_PLATFORM -u _PYTHON_SYSCONFIGDATA_NAME -u PYTHONPATH)
    for cand in "$SOURCE_DIR"/*.whl; do "${plain[@]}" "$py" -m zipfile -e "$cand" "$work/site"; done
    printf '#!/bin/sh\nexec env -u _PYTHON_HOST_PLATFORM -u _PYTHON_SYSCONFIGDATA_NAME PYTHONPATH=%q %s "$@"\n' \
      "$work/site" "$NIGHTLY_CROSS_RUN" > "$work/target-python"
    chmod +x "$work/target-python"
    vpy="$work/target-python"
    return 0
  fi
  vpy="$work/venv/bin/python"
  if uv_venv "$who" "$py" "$work/venv"; then
    :
  else
    echo "$who: fresh virtual environment with $py on $(hostname) (python -m venv, pip)"
    rm -rf "$work/venv"
    "$py" -m venv "$work/venv"
  fi
  if [ "${SMOKE_DEPENDENCIES:-none}" = index ]; then
    # The wheel from its file (a direct requirement: never looked up on an index), its
    # runtime dependencies from the configured indexes ([smoke] dependencies = "index").
    echo "$who: installing the wheel and its dependencies from ${PIP_INDEX_URL:-the pip configuration of this host}${PIP_EXTRA_INDEX_URL:+ and $PIP_EXTRA_INDEX_URL}"
    # The project's own names come only from this build's packages: a name of the project
    # that no wheel here carries (SMOKE_NOT_FROM_INDEX) is constrained to no version at all,
    # so no dependency, direct or transitive, ever takes it from an index and runs its code.
    local own=() name
    for name in ${SMOKE_NOT_FROM_INDEX:-}; do own+=("$name<0"); done
    if [ ${#own[@]} -gt 0 ]; then
      printf '%s\n' "${own[@]}" > "$work/own-names.txt"
      echo "$who: never from an index: $SMOKE_NOT_FROM_INDEX (the project's own names; a dependency on one fails the test)"
      own=(--constraint "$work/own-names.txt")
    fi
    if ! "$vpy" -m pip install --quiet --disable-pip-version-check ${own[@]+"${own[@]}"} \
        "$SOURCE_DIR"/*.whl; then
      if [ ${#own[@]} -gt 0 ]; then
        echo "$who: ERROR: pip could not install the wheel with its dependencies; a dependency on one of the project's own names ($SMOKE_NOT_FROM_INDEX) that this build did not produce is never taken from an index" >&2
      fi
      exit 1
    fi
  elif [ -n "$smoke_uv" ]; then
    "$smoke_uv" pip install --no-config --quiet --python "$vpy" --link-mode copy --no-index --no-deps \
      "$SOURCE_DIR"/*.whl
  else
    "$vpy" -m pip install --quiet --no-index --no-deps "$SOURCE_DIR"/*.whl
  fi
}

# uv_venv WHO PY VENV : a fresh VENV of PY made by uv (NIGHTLY_UV, nightly's), with what
# `python -m venv` would put there (ensurepip's own wheels of the interpreter, installed
# offline): the same clean environment in a fraction of the time (ensurepip costs seconds).
# Sets smoke_uv; false (nothing made) where uv is missing, [build] installer = "pip", the
# interpreter predates 3.8 or uv fails: python -m venv then.
uv_venv() {
  local who=$1 py=$2 venv=$3 wheels
  smoke_uv=""
  [ -n "${NIGHTLY_UV:-}" ] && [ -x "$NIGHTLY_UV" ] && [ "${NIGHTLY_INSTALLER:-auto}" != pip ] || return 1
  wheels=$(bundled_wheels "$py") || wheels=$("$py" - 2>/dev/null <<'PY'
# The wheels ensurepip installs (pip; setuptools before 3.12), where it keeps them: its
# _bundled folder, or the distribution's (Debian: WHEEL_PKG_DIR, /usr/share/python-wheels).
import glob, os, sys, sysconfig
if sys.version_info < (3, 8):
    sys.exit(1)
import ensurepip
names = ["pip"] + (["setuptools"] if sys.version_info < (3, 12) else [])
for folder in (os.path.join(os.path.dirname(ensurepip.__file__), "_bundled"),
               sysconfig.get_config_var("WHEEL_PKG_DIR") or "", "/usr/share/python-wheels"):
    found = [sorted(glob.glob(os.path.join(folder, n + "-*.whl")))[-1:] for n in names]
    if folder and all(found):
        print("\n".join(f[0] for f in found))
        sys.exit(0)
sys.exit(1)
PY
) || return 1
  local IFS='
'
  # shellcheck disable=SC2086 # one wheel a line: split on newlines only
  set -- $wheels
  unset IFS
  echo "$who: fresh virtual environment with $py on $(hostname) (uv $NIGHTLY_UV)"
  # pip's ~1,000 files linked from uv's cache (uv's own default; a copy where the cache is on
  # another file system): the test's user can change that cache with or without the links
  # (its own, or root's when the test runs as root), and pip upgrading itself unlinks, never
  # writes in place. The package under test is always copied (fresh_venv).
  if "$NIGHTLY_UV" venv --no-config --quiet --python "$py" "$venv" &&
     "$NIGHTLY_UV" pip install --no-config --quiet --python "$venv/bin/python" --link-mode hardlink --no-index "$@"; then
    smoke_uv=$NIGHTLY_UV
    return 0
  fi
  echo "$who: uv could not make the environment: python -m venv instead"
  return 1
}

# bundled_wheels PY : the ensurepip wheels of PY (pip; setuptools before 3.12) where an
# interpreter of its own prefix keeps them, PREFIX/lib/pythonX.Y[t]/ensurepip/_bundled
# (DESIRED_PYTHON's X.Y), one a line, found without starting it; false where they are not
# there (then PY is asked: uv_venv).
bundled_wheels() {
  local real xy=${DESIRED_PYTHON:-} names=(pip) name found dir
  [[ "$xy" =~ ^3\.([0-9]+)t?$ ]] && ((BASH_REMATCH[1] >= 8)) || return 1
  ((BASH_REMATCH[1] < 12)) && names+=(setuptools)
  real=$(readlink -f "$(command -v "$1")") && [ "${real%/bin/*}" != "$real" ] || return 1
  dir="${real%/bin/*}/lib/python$xy/ensurepip/_bundled"
  for name in "${names[@]}"; do
    found=$(compgen -G "$dir/$name-*.whl" | sort | tail -n 1)
    [ -n "$found" ] || return 1
    echo "$found"
  done
}

# gil_check PY MODULE : for a free-threaded build (DESIRED_PYTHON 3.14t), PY must run MODULE
# with the GIL disabled: sys._is_gil_enabled() False after the import (an extension that does
# not declare free-threading support turns the GIL back on when it is imported). Nothing to
# check for any other build.
gil_check() {
  local py=$1 module=$2
  case "${DESIRED_PYTHON:-}" in
    *t) ;;
    *) return 0 ;;
  esac
  echo "smoke: free-threaded build: checking that $module runs with the GIL disabled"
  "$py" - "$module" <<'PY'
import importlib, sys
if not hasattr(sys, "_is_gil_enabled"):
    sys.exit(f"smoke: {sys.executable} ({sys.version.split()[0]}) is no free-threaded "
             "interpreter (no sys._is_gil_enabled)")
importlib.import_module(sys.argv[1])
if sys._is_gil_enabled():
    sys.exit(f"smoke: the GIL is enabled after importing {sys.argv[1]}: the build is not "
             "free-threaded (an extension without Py_mod_gil, or PYTHON_GIL=1)")
print("smoke: GIL disabled: free-threaded build")
PY
}
