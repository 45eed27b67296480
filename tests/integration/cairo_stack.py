"""The cairo stack for pycairo's manylinux wheels: a base image holding zlib, libpng, pixman,
freetype and cairo in /usr/local, compiled with nightly's zig toolchain for glibc 2.17.

pycairo links the system's cairo, and auditwheel bundles whatever cairo the build image has:
Debian's (bookworm's needs GLIBC_2.35, bullseye's GLIBC_2.29 through libm's exp/pow/log) cannot
meet manylinux_2_28. Built from the upstream sources against glibc 2.17's symbols, it can. The
image is what a site's manylinux builder images are (PyTorch's add magma and the like in
their Dockerfiles; cibuildwheel's `before-all` builds such libraries per run): a base image
with the project's C libraries, on which nightly adds its layers (`base_image` of the
pycairo builder in tests/integration/corpus.py).

    python -m tests.integration.corpus cairo-image   build it (or find it) and print its tag
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tests.integration.corpus import CACHE, download_checked, record, sha256_of

if TYPE_CHECKING:
    from docker import DockerClient

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "cairo_stack.sh"
POOL = "http://deb.debian.org/debian/pool/main/"
CAIRO_VERSION = "1.18.4"
# The upstream tarballs as Debian's pool keeps them (trixie's versions), pinned by sha256.
SOURCES = (
    ("z/zlib/zlib_1.3.dfsg+really1.3.1.orig.tar.gz",
     "60dd315c07f616887caa029408308a018ace66e3d142726a97db164b3b8f69fb"),
    ("libp/libpng1.6/libpng1.6_1.6.48.orig.tar.gz",
     "b17e99026055727e8cba99160c3a9a7f9af788e9f786daeadded5a42243f1dd0"),
    ("p/pixman/pixman_0.44.0.orig.tar.gz",
     "89a4c1e1e45e0b23dffe708202cb2eaffde0fe3727d7692b2e1739fec78a7dac"),
    ("f/freetype/freetype_2.13.3+dfsg.orig.tar.xz",
     "686ec73cbf6783b245dd068a09ce807b729ac0f8a46dd70f7867923c32fdf4de"),
    (f"c/cairo/cairo_{CAIRO_VERSION}.orig.tar.xz",
     "445ed8208a6e4823de1226a74ca319d3600e83f6369f99b14265006599c32ccb"),
)
TOOLS = ("meson==1.12.1", "ninja==1.13.2")  # the build tools, from PyPI
BASE = "nightly-builder:bookworm"  # the engine's image (scripts/container-engine.sh)
REPOSITORY = "localhost/nightly-corpus/cairo-stack"

DOCKERFILE = """\
FROM {base} AS tools
RUN apt-get update -q && apt-get install -y -q --no-install-recommends pkgconf \\
    && apt-get clean && rm -rf /var/lib/apt/lists/*
FROM tools AS build
COPY zig /opt/nightly-zig
COPY src /tmp/src
COPY wheels /tmp/wheels
COPY cairo_stack.sh /tmp/cairo_stack.sh
RUN bash /tmp/cairo_stack.sh
FROM tools
COPY --from=build /stage/usr/local/ /usr/local/
RUN ldconfig && pkg-config --modversion cairo cairo-ft cairo-png cairo-pdf pixman-1 zlib
LABEL org.nightly.corpus=cairo-stack
"""


def dockerfile() -> str:
    return DOCKERFILE.format(base=BASE)


def fetch_sources() -> list[Path]:
    """The tarballs in the cache, downloaded from Debian's pool when missing; a wrong
    sha256 raises (and the download is dropped)."""
    out = []
    for rel, sha in SOURCES:
        dest = CACHE / "cairo-stack" / "src" / rel.rsplit("/", 1)[1]
        if not (dest.is_file() and sha256_of(dest) == sha):
            download_checked(POOL + rel, dest, sha)
        out.append(dest)
    return out


def fetch_tools() -> list[Path]:
    """meson and ninja wheels for the image's python3 (bookworm: 3.11), from the host's pip
    configuration, kept in the cache."""
    dest = CACHE / "cairo-stack" / "wheels"
    if not (dest / ".complete").is_file():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
             "--no-deps", "--only-binary=:all:", "--platform", "manylinux_2_17_x86_64",
             "--python-version", "3.11", "-d", str(dest), *TOOLS],
            check=True, capture_output=True, text=True,
        )
        (dest / ".complete").write_text("\n".join(TOOLS))
    return sorted(dest.glob("*.whl"))


def image_tag(client: DockerClient) -> str:
    """The tag: a hash of everything the image is made of (the base image's id, the
    Dockerfile, the build script, the sources, the tools and the zig toolchain's version)."""
    from nightly.core.spec import ZIG_REVISION, ZIG_VERSION

    parts = {
        "base": client.images.get(BASE).id, "dockerfile": dockerfile(),
        "script": SCRIPT.read_text(), "sources": SOURCES, "tools": TOOLS,
        "zig": [ZIG_VERSION, ZIG_REVISION],
    }
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]
    return f"{REPOSITORY}:{CAIRO_VERSION}-{digest}"


def _context(log: list[str]) -> io.BytesIO:
    from nightly.images import zig

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        text = dockerfile().encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
        tar.add(str(SCRIPT), arcname="cairo_stack.sh")
        for path in fetch_sources():
            tar.add(str(path), arcname=f"src/{path.name}")
        for path in fetch_tools():
            tar.add(str(path), arcname=f"wheels/{path.name}")
        # nightly's own zig toolchain (the `toolchain = "zig"` builders'), from its cache.
        zig.add_to_context(tar, Path.home() / ".cache" / "nightly" / "images", log.append)
    buf.seek(0)
    return buf


def ensure_image(client: DockerClient) -> tuple[str, dict[str, float]]:
    """The cairo stack image's tag, built when missing; with the figures of a build made
    now (seconds, and the megabytes it adds to its base; also recorded in results.json
    under pycairo's `cairo_stack`), else {}."""
    from docker.errors import ImageNotFound

    tag = image_tag(client)
    try:
        client.images.get(tag)
        return tag, {}
    except ImageNotFound:
        pass
    started = time.monotonic()
    log: list[str] = []
    for chunk in client.api.build(fileobj=_context(log), custom_context=True, tag=tag,
                                  pull=False, rm=True, forcerm=True, decode=True):
        if "stream" in chunk:
            log.append(chunk["stream"])
        if "error" in chunk:
            raise RuntimeError(f"building {tag} failed: {chunk['error']}\n"
                               + "".join(log)[-6000:])
    took = time.monotonic() - started
    size = client.images.get(tag).attrs["Size"] - client.images.get(BASE).attrs["Size"]
    figures = {"build_s": round(took, 1), "added_mb": round(size / 1e6, 1)}
    (CACHE / "cairo-stack" / "build.log").write_text("".join(log))
    record("pycairo", {"cairo_stack": {"image": tag, **figures}})
    return tag, figures
