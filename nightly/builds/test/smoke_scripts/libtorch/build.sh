#!/usr/bin/env bash
# Smoke test of libtorch-style zips: unpack each, compile a small C++ program against its
# headers, link it against its library, run it. SOURCE_DIR holds the zip(s) and program.cpp.
# SMOKE_LIBS: libraries to link (-l), space separated.
set -euo pipefail
work=${WORK_DIR:-$(mktemp -d)}
cxx=$(command -v g++ || command -v c++ || command -v clang++ || true)
[ -n "$cxx" ] || { echo "smoke: no C++ compiler"; exit 1; }
[ -f "$SOURCE_DIR/program.cpp" ] || { echo "smoke: no program to compile (smoke.libtorch_program)"; exit 1; }
for zip in "$SOURCE_DIR"/*.zip; do
  name=$(basename "$zip" .zip)
  dir="$work/$name"
  mkdir -p "$dir"
  # Library symlinks (libx.so -> libx.so.1) must come out as symlinks: zipfile's
  # extractall would write them as small text files the linker cannot read.
  if command -v unzip >/dev/null 2>&1; then
    unzip -q "$zip" -d "$dir"
  else
    python3 - "$zip" "$dir" <<'PY'
import os, stat, sys, zipfile
z, dest = zipfile.ZipFile(sys.argv[1]), sys.argv[2]
for info in z.infolist():
    target = os.path.join(dest, info.filename)
    if stat.S_ISLNK(info.external_attr >> 16):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(z.read(info).decode(), target)
    else:
        z.extract(info, dest)
PY
  fi
  root=$(dirname "$(find "$dir" -type d -name include | head -n 1)")
  if [ ! -d "$root/include" ] || [ ! -d "$root/lib" ]; then
    echo "smoke: $name has no include/ and lib/"; exit 1
  fi
  libs=""
  for l in ${SMOKE_LIBS:-}; do libs="$libs -l$l"; done
  extra=""
  # Static archives need their C++ runtime and, for CUDA builds, the CUDA runtime.
  if ls "$root"/lib/*.a >/dev/null 2>&1 && ! ls "$root"/lib/*.so >/dev/null 2>&1; then
    extra="-lpthread -ldl"
    if [ "${DESIRED_CUDA:-cpu}" != cpu ]; then
      extra="$extra -L${CUDA_HOME:-/usr/local/cuda}/lib64 -lcudart_static -lrt"
    fi
  fi
  echo "smoke: $name: $cxx program.cpp -I include -L lib $libs $extra"
  # $libs and $extra are lists of single-word flags, split on purpose (an array would need
  # bash 4.4 under set -u, and macOS has 3.2).
  # shellcheck disable=SC2086
  "$cxx" -std=c++17 "$SOURCE_DIR/program.cpp" -I "$root/include" -L "$root/lib" $libs $extra \
    -Wl,-rpath,"$root/lib" -o "$dir/program"
  "$dir/program"
  echo "smoke: $name passed"
done
echo "smoke: passed"
