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
    for cand in "/opt/python/cp${num/./}-cp${num/./}"*/bin/python "python$num" python3; do
      if command -v "$cand" >/dev/null 2>&1; then py=$cand; break; fi
    done
  fi
  [ -n "$py" ] || { echo "$who: no interpreter for Python $DESIRED_PYTHON"; exit 1; }
  echo "$who: fresh virtual environment with $py on $(hostname)"
  "$py" -m venv "$work/venv"
  vpy="$work/venv/bin/python"
  if [ "${SMOKE_DEPENDENCIES:-none}" = index ]; then
    # The wheel from its file (a direct requirement: never looked up on an index), its
    # runtime dependencies from the configured indexes ([smoke] dependencies = "index").
    echo "$who: installing the wheel and its dependencies from ${PIP_INDEX_URL:-the pip configuration of this host}${PIP_EXTRA_INDEX_URL:+ and $PIP_EXTRA_INDEX_URL}"
    "$vpy" -m pip install --quiet --disable-pip-version-check "$SOURCE_DIR"/*.whl
  else
    "$vpy" -m pip install --quiet --no-index --no-deps "$SOURCE_DIR"/*.whl
  fi
}
