"""The compiler cache's scripts (nightly/builds/cache/wiring.py writes them into each build's tools
folder): `run`, the `cc`/`c++` wrappers and the CMake `launch`er."""

from __future__ import annotations

from pathlib import Path


def write_tools(folder: Path) -> None:
    folder.mkdir(parents=True)
    for name, text in (("run", RUN), ("cc", WRAPPER.format(var="CC", default="cc")),
                       ("c++", WRAPPER.format(var="CXX", default="c++")), ("launch", LAUNCH),
                       ("fc", FORTRAN)):
        path = folder / name
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)


RUN = r"""#!/bin/bash
# Written by nightly (nightly/builds/cache/wiring.py): this build's compiler cache, then the recipe.
tools="$(cd "$(dirname "$0")" && pwd)"
sc="$NIGHTLY_SCCACHE"
say() { printf '[nightly] %s\n' "$*"; }
rm -f "$tools/stats.json" "$tools/status"
# The compilers the build would have used; the wrappers call them.
export NIGHTLY_CACHE_TOOLS="$tools"
case "${CC:-}" in "" | "$tools/cc") CC=cc ;; esac
case "${CXX:-}" in "" | "$tools/c++") CXX=c++ ;; esac
export NIGHTLY_CACHE_CC="$CC" NIGHTLY_CACHE_CXX="$CXX"
# Fortran: sccache has none; the `fc` wrapper and `launch` count its compiles (uncached.fortran)
# so the statistics say what was not cached and why. FC only where a compiler is.
case "${FC:-}" in "" | "$tools/fc") FC="$(command -v gfortran 2>/dev/null || true)" ;; esac
export NIGHTLY_CACHE_FC="$FC"
rm -f "$tools/uncached.fortran"
rm -f "$SCCACHE_SERVER_UDS"
# The store's credentials: a file only the server reads (never its environment, which a
# process of the same user could read), from an execute-only, hence non-dumpable, binary.
creds="${NIGHTLY_CACHE_CREDENTIALS:-}"
unset NIGHTLY_CACHE_CREDENTIALS
server_bin="$sc"
if [ -n "$creds" ]; then
    export AWS_SHARED_CREDENTIALS_FILE="$creds" AWS_PROFILE=default
    [ -x "$tools/sccache-server" ] && server_bin="$tools/sccache-server"
fi
# The server runs in the foreground as this script's child, not as a daemon: it stays in the
# build's process group (and container), so a build that is killed takes its server and the
# compilers it started along. It checks its storage before it listens: no socket, no cache.
# (TMPDIR=/tmp: its own temporary files stay short of the unix socket path limit.)
TMPDIR=/tmp SCCACHE_START_SERVER=1 SCCACHE_NO_DAEMON=1 "$server_bin" </dev/null >"$tools/server.log" 2>&1 &
server=$!
unset AWS_SHARED_CREDENTIALS_FILE AWS_PROFILE
for _ in $(seq 600); do
    [ -S "$SCCACHE_SERVER_UDS" ] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.05
done
# sccache read the credentials when it checked its storage, before it listened: gone before
# the recipe starts.
[ -z "$creds" ] || rm -f "$creds"
if [ -S "$SCCACHE_SERVER_UDS" ]; then
    export NIGHTLY_CACHE=on CC="$tools/cc" CXX="$tools/c++"
    export CMAKE_C_COMPILER_LAUNCHER="$tools/launch" CMAKE_CXX_COMPILER_LAUNCHER="$tools/launch"
    export CMAKE_CUDA_COMPILER_LAUNCHER="$tools/launch" CMAKE_Fortran_COMPILER_LAUNCHER="$tools/launch"
    [ -z "$NIGHTLY_CACHE_FC" ] || export FC="$tools/fc"
    fc_note="${NIGHTLY_CACHE_FC:+; FC $NIGHTLY_CACHE_FC: counted, never cached, sccache has no Fortran}"
    echo on >"$tools/status"
    say "compiler cache: $("$sc" --version) on $NIGHTLY_CACHE_WHERE" \
        "(CC $NIGHTLY_CACHE_CC, CXX $NIGHTLY_CACHE_CXX, nvcc: CMAKE_CUDA_COMPILER_LAUNCHER$fc_note)"
else
    export NIGHTLY_CACHE=off
    why="$(grep -i -m2 -E 'error|caused by' "$tools/server.log" | tr '\n' ' ' | cut -c1-300)"
    [ -n "$why" ] || why="$(head -n1 "$tools/server.log" | cut -c1-300)"
    printf 'off: sccache server did not start: %s\n' "$why" >"$tools/status"
    say "compiler cache unavailable, building without it: $why"
    kill "$server" 2>/dev/null
fi
# The store's credentials stay with the server; a recipe never sees them.
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN
bash "$@"
rc=$?
if [ "$NIGHTLY_CACHE" = on ] && [ -S "$SCCACHE_SERVER_UDS" ]; then
    if "$sc" --show-stats --stats-format=json >"$tools/stats.json.part" 2>>"$tools/server.log"; then
        mv -f "$tools/stats.json.part" "$tools/stats.json"
    fi
    "$sc" --stop-server >/dev/null 2>&1
fi
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null
rm -f "$SCCACHE_SERVER_UDS"
exit $rc
"""

# {var}: CC or CXX. Only compiles go through the cache; a server that went away means the
# compiler runs directly (never a failed build, never a new server started by a client).
WRAPPER = r"""#!/bin/sh
# Written by nightly (nightly/builds/cache/wiring.py): {var} behind this build's sccache server.
real="${{NIGHTLY_CACHE_{var}:-{default}}}"
set -f  # $real is split into words (flags), never globbed
if [ "${{NIGHTLY_CACHE:-}}" = on ] && [ -S "${{SCCACHE_SERVER_UDS:-}}" ]; then
    for arg in "$@"; do
        # shellcheck disable=SC2086  # CC may carry flags ("gcc -m64")
        [ "$arg" = -c ] && exec "$NIGHTLY_SCCACHE" $real "$@"
    done
fi
# shellcheck disable=SC2086
exec $real "$@"
"""

LAUNCH = r"""#!/bin/sh
# Written by nightly (nightly/builds/cache/wiring.py): CMAKE_<LANG>_COMPILER_LAUNCHER. CMake calls
# `launch COMPILER ARGS...`; nightly's own cc/c++ wrappers are replaced by the compilers they
# stand for, so the cache is keyed on the real compiler and never runs sccache twice.
# The compiler CMake names is one argument (its path may hold spaces); only CC/CXX, which
# may carry flags ("gcc -m64"), are split into words (without globbing).
compiler="$1"
shift
set -f
case "$compiler" in
    # shellcheck disable=SC2086
    "$NIGHTLY_CACHE_TOOLS/cc") set -- ${NIGHTLY_CACHE_CC:-cc} "$@" ;;
    # shellcheck disable=SC2086
    "$NIGHTLY_CACHE_TOOLS/c++") set -- ${NIGHTLY_CACHE_CXX:-c++} "$@" ;;
    # shellcheck disable=SC2086
    "$NIGHTLY_CACHE_TOOLS/fc") set -- ${NIGHTLY_CACHE_FC:-gfortran} "$@" ;;
    *) set -- "$compiler" "$@" ;;
esac
set +f
case "${1##*/}" in
    # sccache caches no Fortran: the compile runs directly, counted as not cached.
    *fortran* | f77 | f90 | f95 | flang* | ifort | ifx)
        printf . >>"$NIGHTLY_CACHE_TOOLS/uncached.fortran" 2>/dev/null
        exec "$@" ;;
esac
if [ "${NIGHTLY_CACHE:-}" = on ] && [ -S "${SCCACHE_SERVER_UDS:-}" ]; then
    exec "$NIGHTLY_SCCACHE" "$@"
fi
exec "$@"
"""

# FC: the Fortran compiler, which sccache cannot cache; each compile (-c) is counted.
FORTRAN = r"""#!/bin/sh
# Written by nightly (nightly/builds/cache/wiring.py): FC, counted; sccache has no Fortran.
real="${NIGHTLY_CACHE_FC:-gfortran}"
set -f  # $real is split into words (flags), never globbed
for arg in "$@"; do
    if [ "$arg" = -c ]; then
        printf . >>"${NIGHTLY_CACHE_TOOLS:-/nonexistent}/uncached.fortran" 2>/dev/null
        break
    fi
done
# shellcheck disable=SC2086
exec $real "$@"
"""
