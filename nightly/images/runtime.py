"""The runtime image: where a declared builder's wheels are smoke-tested.

A wheel is for other people's machines, which have an interpreter and none of what a build
needed. Tested in its builder image, a wheel that links a library of a `-dev` package (or of
the compilers) without bundling it imports fine, because the builder has that library: the
test cannot show the library is missing from the wheel. So with the container executor each
wheel is tested in its builder's runtime image, two images made from the same declaration:

    <repository>-base:<suite>-runtime-<hash>  debootstrap minbase of the suite + bash,
                                              python3, python3-venv, ca-certificates
    <repository>:runtime-<hash>               + /opt/python copied from the builder's cpu
                                              image (the same interpreters, byte for byte)

No compilers, no `-dev` packages, none of the builder's `packages`, no CUDA toolkit: CUDA
wheels bundle their runtime (auditwheel), and the driver's libcuda comes from the host's GPU
runtime when the test has GPU access. One runtime image per builder serves its cpu and every
CUDA image. The runtime base depends on the suite alone, so every builder of a suite shares
its debootstrap (cached like the builder's, by its hash).

The runtime hash covers the base's and the builder's cpu layer's (whose interpreters it
copies). A builder with `base_image` has no clean minbase to start from: it names its own
`runtime_image` (the site's, never built or pulled by nightly), or its wheels are tested in
the builder image with a warning in each test's log. `[smoke] image` overrides all of this
("@build": the build's own image). libtorch zips are tested in the build's image (their test
compiles a program; a runtime image has no compiler); conda packages on the host.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nightly.core.spec import BuilderSpec

if TYPE_CHECKING:
    from docker import DockerClient

    from nightly.config import Config
    from nightly.core.matrix import Build

Log = Callable[[str], None]

REVISION = "1"  # bumped when the runtime image's build procedure changes
# What the runtime base holds beyond minbase: the smoke scripts (bash), a suite python3 with
# venv (a `distro` interpreter's base, and ensurepip for the others' test venvs), TLS roots.
DEBS = ("bash", "ca-certificates", "python3", "python3-venv")
# Package types whose test installs wheels into a fresh venv (the runtime image's job).
WHEEL_PACKAGES = ("manywheel", "wheel")
BUILD_IMAGE = "@build"  # [smoke] image: the build's own image
LABEL_ROLE = "org.nightly.role"
# The image build checks what it must have and what it must not.
CHECK = (
    "for py in /opt/python/*/bin/python; do [ -x \"$py\" ] || continue; "
    "$py -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib, venv, ensurepip'; done; "
    "for c in cc gcc g++ c++ ld; do if command -v $c >/dev/null; then "
    "echo \"runtime image has a compiler: $c\" >&2; exit 1; fi; done"
)


def _digest(parts: dict[str, object]) -> str:
    text = json.dumps({"runtime-revision": REVISION, **parts}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def debs(spec: BuilderSpec) -> tuple[str, ...]:
    """The runtime base's packages: DEBS, plus what the builder's wheels need of the machine
    (another distro Python; the HIP runtime its ROCm wheels declare as a dependency)."""
    return tuple(sorted({*DEBS, *spec.runtime_debs}))


def base_hash(spec: BuilderSpec) -> str:
    extra = {"runtime_debs": list(spec.runtime_debs)} if spec.runtime_debs else {}
    return _digest({"suite": spec.suite, "debs": list(DEBS), **extra})


def image_hash(spec: BuilderSpec) -> str:
    return _digest({"base": base_hash(spec), "cpu": spec.cpu_hash()})


def base_tag(spec: BuilderSpec) -> str:
    return f"{spec.repository}-base:{spec.suite}-runtime-{base_hash(spec)}"


def tag(spec: BuilderSpec) -> str:
    """The builder's runtime image: its `runtime_image`, else nightly's (empty for a builder
    on a `base_image`, which has no clean base to make one from)."""
    if spec.runtime_image:
        return spec.runtime_image
    return "" if spec.base_image else f"{spec.repository}:runtime-{image_hash(spec)}"


def needed_by(config: Config, build: Build) -> tuple[BuilderSpec, str] | None:
    """The builder and runtime image a build's smoke test runs in, when it runs in one."""
    if not config.smoke.enabled or config.smoke.image or build.package not in WHEEL_PACKAGES:
        return None
    spec = config.builder_for(build)
    runtime = tag(spec) if spec is not None else ""
    return (spec, runtime) if spec is not None and runtime else None


def smoke_image(config: Config, build: Build, build_image: str, kind: str) -> tuple[str, str]:
    """The image a test (`kind`: wheel, gputest, libtorch) of `build` runs in, and the line
    for the test's log that names it and why."""
    chosen = config.smoke.image
    if chosen == BUILD_IMAGE:
        return build_image, f"in image {build_image}, the build's own ([smoke] image = \"@build\")"
    if chosen:
        return chosen, f"in image {chosen} ([smoke] image)"
    if kind == "libtorch":
        return build_image, (f"in image {build_image}, the build's own (the libtorch test "
                             "compiles a program; a runtime image has no compiler)")
    spec = config.builder_for(build)
    if spec is None:
        return build_image, f"in image {build_image}, the build's own (no declared builder)"
    runtime = tag(spec)
    if not runtime:
        return build_image, (
            f"WARNING: builder {spec.name} builds on base_image {spec.base_image}, so nightly "
            f"has no clean runtime image for it: testing in the build's image {build_image}, "
            "where a library the wheel does not bundle may still be found (set "
            f"[builders.{spec.name}] runtime_image)")
    what = ("its runtime_image" if spec.runtime_image else
            "its interpreters without compilers, -dev packages or CUDA toolkit")
    return runtime, f"in image {runtime}, the runtime image of builder {spec.name} ({what})"


# -- building -------------------------------------------------------------------------------

def ensure_base(client: DockerClient, spec: BuilderSpec, cache: Path, log: Log) -> str:
    """The runtime base: a minbase of the suite with DEBS, debootstrapped once per suite."""
    from nightly.images import cuda, engine, rootfs

    tag_ = base_tag(spec)
    if engine.inspect(client, tag_) is not None:
        log(f"{tag_}: present")
        return tag_
    mirror = spec.mirror or cuda.host_mirror()
    fs = rootfs.bootstrap(suite=spec.suite, packages=(), key=f"runtime-{base_hash(spec)}",
                          mirror=mirror, cache=cache, log=log, essential=debs(spec))
    engine.write_header(engine.log_file(cache, tag_), tag_, spec,
                  [f"suite:    {spec.suite} ({mirror})", f"packages: {' '.join(debs(spec))}"])
    return engine.import_rootfs(
        client, fs, tag_, {engine.LABEL_SPEC: spec.name, engine.LABEL_HASH: base_hash(spec),
                           LABEL_ROLE: "runtime"}, cache, log)


def dockerfile(spec: BuilderSpec, labels: dict[str, str]) -> str:
    # Multi-stage: the interpreters as the cpu layer made them (RUNPATHs rewritten, setuptools
    # and wheel installed), without the patchelf and compilers that made them so.
    return "\n".join([
        f"FROM {spec.cpu_tag()} AS builder",
        f"FROM {base_tag(spec)}",
        "COPY --from=builder /opt/python /opt/python",
        f"RUN set -e; {CHECK}",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        # JSON strings are what LABEL takes quoted (the pythons' value has spaces).
        "LABEL " + " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items())),
    ]) + "\n"


def ensure(client: DockerClient, spec: BuilderSpec, cache: Path, log: Log) -> str:
    """Build (or find) the builder's runtime image; a `runtime_image` is only looked for."""
    from nightly.images import engine

    tag_ = tag(spec)
    if not tag_:
        raise engine.ImageBuildError(f"builder {spec.name} builds on base_image "
                                     f"{spec.base_image}: nightly makes no runtime image for it")
    if engine.inspect(client, tag_) is not None:
        log(f"{tag_}: present")
        return tag_
    if spec.runtime_image:
        raise engine.ImageBuildError(
            f"builder {spec.name}: runtime_image {tag_} is not on the engine; pull or load it "
            f"first (e.g. `podman pull {tag_}`)")
    with engine.cache_lock(cache):
        cpu = engine.ensure_cpu(client, spec, cache, log)
        base = ensure_base(client, spec, cache, log)
        labels = {
            engine.LABEL_SPEC: spec.name, engine.LABEL_HASH: image_hash(spec), LABEL_ROLE: "runtime",
            engine.LABEL_PYTHONS: " ".join(f"{p.version}={p.describe()}" for p in spec.pythons),
        }
        logfile = engine.log_file(cache, tag_)
        engine.write_header(logfile, tag_, spec, [f"parent:   {base}", f"pythons:  /opt/python of {cpu}"])

        def write(ctx: Path) -> None:
            data = dockerfile(spec, labels).encode()
            info = tarfile.TarInfo("Dockerfile")
            info.size, info.mode = len(data), 0o644
            with tarfile.open(ctx, "w") as tar:
                tar.addfile(info, io.BytesIO(data))

        return engine.build_from_context(client, cache / "tmp" / f"ctx-runtime-{image_hash(spec)}.tar",
                                         tag_, logfile, log, write)
