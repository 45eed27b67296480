#!/usr/bin/env bash
# libtorch: the project's C++ library as a zip, built by CMake: configure, build, install
# into a staging prefix, zip as libtorch-<variant>-<version>.zip with one top folder
# `libtorch/` holding lib/, include/ (and whatever else the project installs, e.g.
# lib/cmake/ or share/), plus `build-version`.
#
# LIBTORCH_VARIANT is one of
#   shared-with-deps     BUILD_SHARED_LIBS=ON, plus the non-system shared libraries the
#                        project's libraries load (libstdc++, libgcc_s, libcudart, ...),
#                        found with ldd, copied into lib/ next to them (RPATH $ORIGIN)
#   shared-without-deps  BUILD_SHARED_LIBS=ON, the project's files only
#   static-with-deps     BUILD_SHARED_LIBS=OFF, plus the runtime libraries a program linking
#                        the archives needs: the C++ runtime when they use it, the static
#                        CUDA runtime (libcudart_static.a) when they call CUDA
#   static-without-deps  BUILD_SHARED_LIBS=OFF, the project's files only
#   all                  the four above in one run (four zips)
# "System" libraries, never bundled: glibc's (libc, libm, libdl, libpthread, librt, ld-linux
# ...) and the CUDA driver (libcuda), which belongs to the machine that runs the program.
#
# CUDA builds (DESIRED_CUDA=cuXYZ) configure with -DUSE_CUDA=ON and the toolkit's nvcc
# (CMAKE_CUDA_COMPILER, CUDAToolkit_ROOT), and the version gets +cuXYZ like the wheels.
# ROCm builds (DESIRED_CUDA=rocmX.Y) configure with -DUSE_ROCM=ON and PYTORCH_ROCM_ARCH (the
# GPU targets; the ROCm builder image sets it), and the version gets +rocmX.Y. The HIP
# runtime (libamdhip64) is the machine's ROCm, like the CUDA driver: never bundled.
#
# Environment: the recipe contract of docs/recipes.md (DESIRED_PYTHON is not used), plus (all
# optional) CUDA_HOME and WORK_DIR as described in recipes/common/lib.sh, and:
#   CMAKE_SOURCE_SUBDIR  folder of the CMake project inside SOURCE_DIR. Unset: cpp/ when
#                        SOURCE_DIR/cpp/CMakeLists.txt exists, else SOURCE_DIR itself.
#   CMAKE_ARGS           extra arguments for the CMake configure step (split on spaces).
#   MAX_JOBS             parallel compile jobs (default: the number of CPUs).
#   NIGHTLY_MANYLINUX    the declared glibc policy ([matrix.linux.libtorch] manylinux, e.g.
#                        2_28; set by nightly, which also sets CC/CXX to its glibc sysroot
#                        toolchain on a host newer than the policy). Under a policy the C++
#                        runtime is linked statically (-static-libstdc++ -static-libgcc), so
#                        a zip needs no GLIBCXX_ and bundles no libstdc++/libgcc_s of a newer
#                        glibc; nightly checks the zip's glibc against the policy afterwards.
set -euo pipefail

# shellcheck disable=SC2034  # read by common/lib.sh
RECIPE=libtorch
# shellcheck source-path=SCRIPTDIR source=../common/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../common/lib.sh"

init_recipe
require_env LIBTORCH_VARIANT
command -v cmake >/dev/null 2>&1 || die "cmake is not installed (looked on PATH=$PATH)"

VARIANTS=(shared-with-deps shared-without-deps static-with-deps static-without-deps)
case "$LIBTORCH_VARIANT" in
    all) variants=("${VARIANTS[@]}") ;;
    shared-with-deps | shared-without-deps | static-with-deps | static-without-deps)
        variants=("$LIBTORCH_VARIANT") ;;
    *) die "LIBTORCH_VARIANT=$LIBTORCH_VARIANT is not one of: ${VARIANTS[*]} all" ;;
esac

if [[ -n "${CMAKE_SOURCE_SUBDIR:-}" ]]; then
    cmake_src="$SOURCE_DIR/$CMAKE_SOURCE_SUBDIR"
elif [[ -f "$SOURCE_DIR/cpp/CMakeLists.txt" ]]; then
    cmake_src="$SOURCE_DIR/cpp"
else
    cmake_src="$SOURCE_DIR"
fi
[[ -f "$cmake_src/CMakeLists.txt" ]] ||
    die "no CMakeLists.txt in $cmake_src (looked in \$CMAKE_SOURCE_SUBDIR, then cpp/, then the source root)"
log "CMake project: $cmake_src"

setup_cuda
version="${PACKAGE_VERSION:-$BUILD_VERSION}"  # with +cuXYZ for CUDA builds (nightly decides)
set_project_version "$version"

jobs="${MAX_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
extra_args=()
# Word splitting is the documented behaviour of CMAKE_ARGS.
# shellcheck disable=SC2206
[[ -n "${CMAKE_ARGS:-}" ]] && extra_args=($CMAKE_ARGS)

# is_system_lib SONAME : libraries every Linux has (glibc) and the GPU driver.
is_system_lib() {
    case "$1" in
        linux-vdso.so* | linux-gate.so* | ld-linux*.so* | ld64.so* | libc.so* | libm.so* | libdl.so* | \
            libpthread.so* | librt.so* | libresolv.so* | libutil.so* | libnsl.so* | libanl.so* | \
            libcrypt.so* | libmvec.so* | libcuda.so* | libnvidia-*.so* | libamdhip64.so*) return 0 ;;
    esac
    return 1
}

# elf_files DIR : regular ELF files (shared libraries, executables) under DIR.
elf_files() {
    local f
    while IFS= read -r -d '' f; do
        [[ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" == '177ELF' ]] && echo "$f"
    done < <(find "$1" -type f -print0)
}

# direct_needs FILE : the sonames FILE itself needs (DT_NEEDED); nothing when readelf is
# missing (then every library ldd lists counts, as before).
direct_needs() {
    command -v readelf >/dev/null 2>&1 || return 0
    readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' || true
}

# bundle_shared_deps PREFIX : copy the non-system libraries that PREFIX's ELF files load
# into PREFIX/lib, until nothing new turns up (a copied library can need others). Only what
# a file needs itself: what a system library (the HIP runtime) loads is the machine's too.
bundle_shared_deps() {
    local prefix="$1" changed=1 f line soname path needs copied=()
    command -v ldd >/dev/null 2>&1 || die "ldd is not installed: cannot find the libraries to bundle"
    while ((changed)); do
        changed=0
        while IFS= read -r f; do
            needs=" $(direct_needs "$f" | tr '\n' ' ') "
            while IFS= read -r line; do
                # "libfoo.so.1 => /path/libfoo.so.1 (0x...)" or "libfoo.so.1 => not found"
                [[ "$line" == *"=>"* ]] || continue
                soname="$(echo "$line" | awk '{print $1}')"
                path="$(echo "$line" | awk '{print $3}')"
                is_system_lib "$soname" && continue
                [[ "$needs" == "  " || "$needs" == *" $soname "* ]] || continue
                [[ -e "$prefix/lib/$soname" ]] && continue
                [[ "$path" == /* ]] || die "$(basename "$f") needs $soname, which is not found (ldd: $line)"
                cp -L "$path" "$prefix/lib/$soname"
                chmod u+w "$prefix/lib/$soname"
                copied+=("$soname")
                changed=1
            done < <(LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$f" 2>/dev/null || true)
        done < <(elf_files "$prefix")
    done
    if ((${#copied[@]})); then
        log "bundled: ${copied[*]}"
    else
        log "bundled: nothing (no non-system dependencies)"
    fi
    # Bundled libraries find each other through $ORIGIN; the project's own libraries got it
    # from CMAKE_INSTALL_RPATH.
    if command -v patchelf >/dev/null 2>&1; then
        for soname in ${copied[@]+"${copied[@]}"}; do
            # shellcheck disable=SC2016  # a literal $ORIGIN, expanded by the dynamic loader
            patchelf --set-rpath '$ORIGIN' "$prefix/lib/$soname"
        done
    elif ((${#copied[@]})); then
        warn "patchelf is not installed: bundled libraries keep their own RPATH"
    fi
}

# bundle_static_deps PREFIX : the runtime libraries a program linking PREFIX's archives needs.
bundle_static_deps() {
    local prefix="$1" undefined="" a lib copied=()
    command -v nm >/dev/null 2>&1 || die "nm (binutils) is not installed: cannot tell what the archives need"
    for a in "$prefix"/lib/*.a; do
        [[ -e "$a" ]] || continue
        undefined+="$(nm -u "$a" 2>/dev/null || true)"$'\n'
    done
    if grep -q -E '__gxx_personality_v0|__cxa_|_ZNSt|_ZSt' <<<"$undefined"; then
        for lib in libstdc++.so.6 libgcc_s.so.1; do
            local path
            path="$("${CXX:-c++}" -print-file-name="$lib" 2>/dev/null || true)"
            [[ "$path" == /* && -e "$path" ]] || die "cannot find $lib to bundle (asked ${CXX:-c++} -print-file-name)"
            cp -L "$path" "$prefix/lib/$lib"
            copied+=("$lib")
        done
    fi
    if grep -q -E '\bcuda[A-Z][A-Za-z]*|__cudaRegister' <<<"$undefined"; then
        local cudart=""
        for lib in "$CUDA_HOME/lib64/libcudart_static.a" "$CUDA_HOME/lib/libcudart_static.a"; do
            [[ -e "$lib" ]] && cudart="$lib" && break
        done
        [[ -n "$cudart" ]] || die "the archives call the CUDA runtime but $CUDA_HOME has no libcudart_static.a"
        cp -L "$cudart" "$prefix/lib/"
        copied+=(libcudart_static.a)
    fi
    if ((${#copied[@]})); then
        log "bundled: ${copied[*]}"
    else
        log "bundled: nothing (the archives need only system libraries)"
    fi
}

# make_zip FOLDER ZIP : zip FOLDER's content (relative paths), keeping symlinks as links.
make_zip() {
    local folder="$1" zip="$2"
    rm -f "$zip"
    if command -v zip >/dev/null 2>&1; then
        (cd "$folder" && zip -q -r -y "$zip" .)
    else
        # No zip tool (a slim image): Python's zipfile stores links as copies of their target.
        local py
        py="$(command -v python3 || command -v python || true)"
        [[ -n "$py" ]] || die "neither zip nor a python is installed: cannot make $zip"
        (cd "$folder" && "$py" -m zipfile -c "$zip" libtorch)
    fi
}

build_variant() {
    local variant="$1" shared stage build zip
    case "$variant" in
        shared-*) shared=ON ;;
        static-*) shared=OFF ;;
    esac
    build="$WORK_DIR/build-$variant"
    stage="$WORK_DIR/stage-$variant/libtorch"
    rm -rf "$build" "$WORK_DIR/stage-$variant"
    mkdir -p "$build" "$stage"

    local args=(-S "$cmake_src" -B "$build"
        -DCMAKE_BUILD_TYPE=Release
        -DBUILD_SHARED_LIBS="$shared"
        -DCMAKE_INSTALL_PREFIX="$stage"
        -DCMAKE_INSTALL_LIBDIR=lib
        -DCMAKE_INSTALL_INCLUDEDIR=include
        -DCMAKE_INSTALL_BINDIR=bin
        # Bundled dependencies sit next to the project's libraries.
        "-DCMAKE_INSTALL_RPATH=\$ORIGIN"
        # Projects that do not know these options get a harmless "unused variable" notice.
        --no-warn-unused-cli)
    if [[ -n "${NIGHTLY_MANYLINUX:-}" && "$NIGHTLY_MANYLINUX" != off ]]; then
        # The C++ runtime inside the project's libraries: the build compiler's libstdc++ and
        # libgcc_s need a newer glibc (and GLIBCXX) than the policy's platforms have.
        args+=("-DCMAKE_SHARED_LINKER_FLAGS=-static-libstdc++ -static-libgcc"
            "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc"
            "-DCMAKE_MODULE_LINKER_FLAGS=-static-libstdc++ -static-libgcc")
    fi
    if is_rocm_build; then
        args+=(-DUSE_ROCM=ON)  # the targets: PYTORCH_ROCM_ARCH, read by the project
    fi
    if is_cuda_build; then
        args+=(-DUSE_CUDA=ON -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" -DCUDAToolkit_ROOT="$CUDA_HOME")
    else
        args+=(-DUSE_CUDA=OFF)
    fi
    log "[$variant] configure: cmake ${generator[*]:-} ${args[*]} ${extra_args[*]:-}"
    cmake ${generator[@]+"${generator[@]}"} "${args[@]}" ${extra_args[@]+"${extra_args[@]}"} ||
        die "[$variant] CMake configure failed (output above)"
    cmake --build "$build" --parallel "$jobs" || die "[$variant] build failed (output above)"
    cmake --install "$build" || die "[$variant] install failed (output above)"

    # A zip without a library or headers is not a package: fail rather than ship it.
    local libs=()
    shopt -s nullglob
    if [[ "$shared" == ON ]]; then libs=("$stage"/lib/*.so*); else libs=("$stage"/lib/*.a); fi
    shopt -u nullglob
    ((${#libs[@]})) || die "[$variant] the CMake project installed no $([[ $shared == ON ]] && echo shared || echo static) library into lib/"
    if [[ ! -d "$stage/include" ]] || [[ -z "$(ls -A "$stage/include")" ]]; then
        die "[$variant] the CMake project installed no headers into include/"
    fi

    case "$variant" in
        shared-with-deps) bundle_shared_deps "$stage" ;;
        static-with-deps) bundle_static_deps "$stage" ;;
    esac
    echo "$version" >"$stage/build-version"

    zip="$WORK_DIR/libtorch-$variant-$version.zip"
    make_zip "$(dirname "$stage")" "$zip"
    deliver "$zip"
}

for variant in "${variants[@]}"; do
    build_variant "$variant"
done
