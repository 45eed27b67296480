"""The compiler cache's scripts (nightly/builds/cache/wiring.py writes them into each build's tools
folder): `run`, the `cc`/`c++` wrappers, the CMake `launch`er, `start` (the server of a
cache on local disk, started by the build's first compile) and `fc` (Fortran, counted: sccache
has none)."""

from __future__ import annotations

from pathlib import Path


def write_tools(folder: Path) -> None:
    folder.mkdir(parents=True)
    for name, text in (("run", RUN), ("cc", WRAPPER.format(var="CC", default="cc")),
                       ("c++", WRAPPER.format(var="CXX", default="c++")), ("launch", LAUNCH),
                       ("start", START), ("fc", FORTRAN)):
        path = folder / name
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)


RUN = r"""#!/bin/bash
# Written by nightly (nightly/builds/cache/wiring.py): this build's compiler cache, then the recipe.
# nightly names this script by its absolute path: its folder, without a process forked for it.
case "$0" in
    /*/run) tools="${0%/run}" ;;
    *) tools="$(cd "$(dirname "$0")" && pwd)" ;;
esac
sc="$NIGHTLY_SCCACHE"
say() { printf '[nightly] %s\n' "$*"; }
# rm only for what is there: a process less for each file a fresh build does not have.
drop() { for f in "$@"; do if [ -e "$f" ] || [ -L "$f" ]; then rm -f "$f"; fi; done; }
drop "$tools/stats.json" "$tools/status"
# The compilers the build would have used; the wrappers call them.
export NIGHTLY_CACHE_TOOLS="$tools"
case "${CC:-}" in "" | "$tools/cc") CC=cc ;; esac
case "${CXX:-}" in "" | "$tools/c++") CXX=c++ ;; esac
export NIGHTLY_CACHE_CC="$CC" NIGHTLY_CACHE_CXX="$CXX"
# Fortran: sccache has none; the `fc` wrapper and `launch` count its compiles (uncached.fortran)
# so the statistics say what was not cached and why. FC only where a compiler is.
# (hash, not $(command -v): no process forked for it.)
case "${FC:-}" in
    "" | "$tools/fc") FC=""; if hash gfortran 2>/dev/null; then FC="${BASH_CMDS[gfortran]}"; fi ;;
esac
export NIGHTLY_CACHE_FC="$FC"
drop "$tools/uncached.fortran" "$SCCACHE_SERVER_UDS"
# The version nightly asked once (NIGHTLY_SCCACHE_VERSION), else asked now (a process
# less a build when nightly asked it: no command substitution for the log's line).
version="${NIGHTLY_SCCACHE_VERSION:-}"
[ -n "$version" ] || version="$("$sc" --version)"
cached() {
    export NIGHTLY_CACHE=on CC="$tools/cc" CXX="$tools/c++"
    export CMAKE_C_COMPILER_LAUNCHER="$tools/launch" CMAKE_CXX_COMPILER_LAUNCHER="$tools/launch"
    export CMAKE_CUDA_COMPILER_LAUNCHER="$tools/launch" CMAKE_Fortran_COMPILER_LAUNCHER="$tools/launch"
    [ -z "$NIGHTLY_CACHE_FC" ] || export FC="$tools/fc"
    echo on >"$tools/status"
}
off() {  # why the server did not start: the status (state.json) and $why for the log
    why="$(grep -i -m2 -E 'error|caused by' "$tools/server.log" 2>/dev/null | tr '\n' ' ' | cut -c1-300)"
    [ -n "$why" ] || why="$(head -n1 "$tools/server.log" 2>/dev/null | cut -c1-300)"
    printf 'off: sccache server did not start: %s\n' "$why" >"$tools/status"
}
# gone PID : a lazily started server, told to stop, has ended (up to 5 s; then it is killed):
# nothing of the build's runs on after it. A zombie counts as ended (sccache's name has no
# space, so its state is the third word of /proc/PID/stat).
gone() {
    local st
    [ -n "$1" ] || return 0
    for _ in $(seq 500); do
        read -r _ _ st _ <"/proc/$1/stat" 2>/dev/null || return 0
        [ "$st" = Z ] && return 0
        sleep 0.01
    done
    kill "$1" 2>/dev/null
}
fc_note="${NIGHTLY_CACHE_FC:+; FC $NIGHTLY_CACHE_FC: counted, never cached, sccache has no Fortran}"
compilers="(CC $NIGHTLY_CACHE_CC, CXX $NIGHTLY_CACHE_CXX, nvcc: CMAKE_CUDA_COMPILER_LAUNCHER$fc_note)"
# The store's credentials: a file only the server reads (never its environment, which a
# process of the same user could read), from an execute-only, hence non-dumpable, binary.
creds="${NIGHTLY_CACHE_CREDENTIALS:-}"
unset NIGHTLY_CACHE_CREDENTIALS
server=""
if [ -z "$creds" ]; then
    # A cache on local disk: its server starts at the build's first compile (`start`, which
    # the wrappers and the launcher call), so a build that compiles nothing starts none, and
    # no build waits for a server before its recipe runs. It stays in the build's process
    # group (and container) like the recipe's other processes.
    export NIGHTLY_CACHE_LAZY=1
    cached
    say "compiler cache: $version on $NIGHTLY_CACHE_WHERE, its server started by the" \
        "first compile $compilers"
else
    export AWS_SHARED_CREDENTIALS_FILE="$creds" AWS_PROFILE=default
    server_bin="$sc"
    [ -x "$tools/sccache-server" ] && server_bin="$tools/sccache-server"
    # The server runs in the foreground as this script's child, not as a daemon: it stays in
    # the build's process group (and container), so a build that is killed takes its server
    # and the compilers it started along. It checks its storage before it listens: no
    # socket, no cache. (TMPDIR=/tmp: its own temporary files stay short of the unix socket
    # path limit.)
    TMPDIR=/tmp SCCACHE_START_SERVER=1 SCCACHE_NO_DAEMON=1 "$server_bin" </dev/null \
        >"$tools/server.log" 2>&1 &
    server=$!
    unset AWS_SHARED_CREDENTIALS_FILE AWS_PROFILE
    # Checked every 10 ms (up to 30 s): a server is usually listening within a few.
    for _ in $(seq 3000); do
        [ -S "$SCCACHE_SERVER_UDS" ] && break
        kill -0 "$server" 2>/dev/null || break
        sleep 0.01
    done
    # sccache read the credentials when it checked its storage, before it listened: gone
    # before the recipe starts.
    rm -f "$creds"
    if [ -S "$SCCACHE_SERVER_UDS" ]; then
        cached
        say "compiler cache: $version on $NIGHTLY_CACHE_WHERE $compilers"
    else
        export NIGHTLY_CACHE=off
        off
        say "compiler cache unavailable, building without it: $why"
        kill "$server" 2>/dev/null
    fi
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
    gone "$(cat "$tools/server.pid" 2>/dev/null)"
elif [ "$NIGHTLY_CACHE" = on ] && [ -e "$tools/server.failed" ]; then
    off
    say "compiler cache unavailable, compiled without it: $why"
elif [ "$NIGHTLY_CACHE" = on ] && [ ! -e "$tools/server.start" ]; then
    # Nothing compiled through the cache, so no server was started: nothing to ask one.
    printf '{"stats":{"compile_requests":0}}\n' >"$tools/stats.json"
fi
# Only a server that is this script's own child is killed by its number (a lazily started
# one was stopped above; one that would not stop goes with the build's process group).
if [ -n "$server" ]; then
    kill "$server" 2>/dev/null
    wait "$server" 2>/dev/null
fi
drop "$SCCACHE_SERVER_UDS"
exit $rc
"""

# The build's sccache server, started by the first compile that needs it (a cache on local
# disk: NIGHTLY_CACHE_LAZY=1). One server a build, started once: the first caller makes
# server.start (mkdir is atomic) and starts it; every caller waits for its socket (10 ms
# steps, up to 30 s). Exit 0: listening; 1: not, and the caller compiles without the cache,
# as it does when a server went away (server.failed says so to the others and to `run`).
START = r"""#!/bin/sh
# Written by nightly (nightly/builds/cache/wiring.py): this build's sccache server, at its first compile.
tools="$NIGHTLY_CACHE_TOOLS"
sock="${SCCACHE_SERVER_UDS:-}"
if mkdir "$tools/server.start" 2>/dev/null; then
    TMPDIR=/tmp SCCACHE_START_SERVER=1 SCCACHE_NO_DAEMON=1 "$NIGHTLY_SCCACHE" </dev/null \
        >"$tools/server.log" 2>&1 &
    echo $! >"$tools/server.pid"
fi
i=0
while [ "$i" -lt 3000 ]; do
    [ -S "$sock" ] && exit 0
    [ -e "$tools/server.failed" ] && exit 1
    pid="$(cat "$tools/server.pid" 2>/dev/null)"
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
        : >"$tools/server.failed"
        exit 1
    fi
    sleep 0.01
    i=$((i + 1))
done
: >"$tools/server.failed"
exit 1
"""

# {var}: CC or CXX. Only compiles go through the cache; the first one starts the build's
# server when it starts lazily (`start`); a server that went away or did not start means the
# compiler runs directly (never a failed build, never a second server).
WRAPPER = r"""#!/bin/sh
# Written by nightly (nightly/builds/cache/wiring.py): {var} behind this build's sccache server.
real="${{NIGHTLY_CACHE_{var}:-{default}}}"
set -f  # $real is split into words (flags), never globbed
if [ "${{NIGHTLY_CACHE:-}}" = on ]; then
    for arg in "$@"; do
        [ "$arg" = -c ] || continue
        if [ -S "${{SCCACHE_SERVER_UDS:-}}" ] ||
            {{ [ "${{NIGHTLY_CACHE_LAZY:-}}" = 1 ] && "$NIGHTLY_CACHE_TOOLS/start"; }}; then
            # shellcheck disable=SC2086  # CC may carry flags ("gcc -m64")
            exec "$NIGHTLY_SCCACHE" $real "$@"
        fi
        break
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
if [ "${NIGHTLY_CACHE:-}" = on ] && { [ -S "${SCCACHE_SERVER_UDS:-}" ] ||
    { [ "${NIGHTLY_CACHE_LAZY:-}" = 1 ] && "$NIGHTLY_CACHE_TOOLS/start"; }; }; then
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
