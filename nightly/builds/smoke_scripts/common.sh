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
  echo "$who: fresh virtual environment with $py on $(hostname)"
  "$py" -m venv "$work/venv"
  vpy="$work/venv/bin/python"
  "$vpy" -m pip install --quiet --no-index --no-deps "$SOURCE_DIR"/*.whl
}
