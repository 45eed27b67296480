#!/bin/bash
# Builds the cairo stack (zlib, libpng, pixman, freetype, cairo) with nightly's zig toolchain
# (`zig cc -target x86_64-linux-gnu.2.17`) into /usr/local, staged under $STAGE. Run by the
# Dockerfile of tests/integration/cairo_stack.py inside an image build, the way cibuildwheel's
# `before-all` or a manylinux image's build scripts build a C library: linked against glibc
# 2.17's symbols only (exp, pow, log at their GLIBC_2.2.5 versions, not libm 2.29's), so a
# wheel that bundles these libraries can meet manylinux_2_17. Sources: the upstream tarballs
# from Debian's pool, in /tmp/src, sha256-checked on the host before they got here.
set -euo pipefail

STAGE=${STAGE:-/stage}
PREFIX=/usr/local
JOBS=${JOBS:-2}
SRC=/tmp/src
WORK=/tmp/work
export CC=/opt/nightly-zig/bin/cc CXX=/opt/nightly-zig/bin/c++
# The zig cache lives outside the staged tree (only /usr/local is kept).
export ZIG_GLOBAL_CACHE_DIR=/tmp/zig-cache ZIG_LOCAL_CACHE_DIR=/tmp/zig-cache
# Each library is found through pkg-config, the staged copies first.
export PKG_CONFIG_PATH=$STAGE$PREFIX/lib/pkgconfig:$STAGE$PREFIX/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$STAGE
# zig's clang makes __DATE__ an error (cairo's util/csi-trace prints it) and adds debug
# information by default (-g0: the libraries go into every wheel, 4x smaller without it).
export CFLAGS="-O2 -g0 -fPIC -Wno-error=date-time" LDFLAGS="-L$STAGE$PREFIX/lib"
export CPPFLAGS="-I$STAGE$PREFIX/include"
export PATH=/tmp/tools/bin:$PATH

unpack() {  # unpack TARBALL-GLOB DIR: the tarball's single top folder as $WORK/DIR
    mkdir -p "$WORK/$2"
    # shellcheck disable=SC2086  # $1 is a glob: the versions are cairo_stack.py's business
    tar -xf "$SRC"/$1 -C "$WORK/$2" --strip-components=1
}

meson_build() {  # meson_build DIR [OPTION...]: configure, build and stage a meson project
    local dir=$1
    shift
    (cd "$WORK/$dir" &&
        meson setup _build --prefix=$PREFIX --libdir=lib --buildtype=release \
            --default-library=shared --wrap-mode=nofallback "$@" &&
        ninja -C _build -j "$JOBS" &&
        meson install -C _build --destdir "$STAGE" --no-rebuild)
}

python3 -m venv /tmp/tools
/tmp/tools/bin/pip install -q --no-index --find-links /tmp/wheels meson ninja

# zlib's configure tries its version script on a test object that lacks the symbols, which
# lld (zig's linker) refuses unless told --undefined-version: else it builds no libz.so.
unpack 'zlib_*.orig.tar.gz' zlib
(cd "$WORK/zlib" &&
    LDSHARED="$CC -shared -Wl,--undefined-version,-soname,libz.so.1,--version-script,zlib.map" \
        ./configure --prefix=$PREFIX && make -j "$JOBS" && make install DESTDIR="$STAGE")

unpack 'libpng1.6_*.orig.tar.gz' libpng
(cd "$WORK/libpng" && ./configure --prefix=$PREFIX --disable-static &&
    make -j "$JOBS" && make install DESTDIR="$STAGE")

unpack 'pixman_*.orig.tar.gz' pixman
meson_build pixman -Dtests=disabled -Ddemos=disabled -Dgtk=disabled -Dlibpng=disabled

unpack 'freetype_*.orig.tar.xz' freetype
meson_build freetype -Dbrotli=disabled -Dbzip2=disabled -Dharfbuzz=disabled -Dpng=enabled \
    -Dzlib=enabled -Dtests=disabled

unpack 'cairo_*.orig.tar.xz' cairo
meson_build cairo -Dpng=enabled -Dzlib=enabled -Dfreetype=enabled -Dfontconfig=disabled \
    -Dtee=enabled -Dxlib=disabled -Dxcb=disabled -Dglib=disabled -Dspectre=disabled \
    -Dsymbol-lookup=disabled -Dlzo=disabled -Dtests=disabled -Ddwrite=disabled \
    -Dquartz=disabled

# The .pc files name the stage nowhere (DESTDIR installs), so the tree works where it is
# copied to: /usr/local of the final image. Kept: the libraries, headers and .pc files; not
# the static libraries, docs and the tools (pngfix, cairo-trace and its libraries).
cd "$STAGE$PREFIX"
rm -rf share/doc share/man bin lib/cairo lib/libcairo-script-interpreter.so* \
    lib/pkgconfig/cairo-script-interpreter.pc
find lib -name '*.la' -delete
find lib -name '*.a' -delete

# Proven here, not hoped: each library exists and needs glibc 2.17's symbols at most.
for lib in libz.so.1 libpng16.so.16 libpixman-1.so.0 libfreetype.so.6 libcairo.so.2; do
    newest=$(objdump -T "lib/$lib" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n1)
    echo "$lib: $(du -kL "lib/$lib" | cut -f1) KB, newest symbol version $newest"
    [ "$(printf '%s\n' "$newest" GLIBC_2.17 | sort -V | tail -n1)" = GLIBC_2.17 ] ||
        { echo "$lib needs $newest: newer than glibc 2.17" >&2; exit 1; }
done
