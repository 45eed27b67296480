"""Build contexts (a tar with a Dockerfile) for the interpreter and CUDA layers.

Interpreters are copied in from where the spec says (a host folder, an install_only archive,
or the suite's python3) to the manylinux layout /opt/python/cpXY-cpXY, without what a build
never needs: the test suite, IDLE/tkinter, __pycache__, the static libpython and every
site-package but pip (setuptools and wheel are installed fresh from cached wheels; a
foreign .pth file of the host's never comes along).
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Callable
from pathlib import Path

from nightly import procs
from nightly.core.spec import BuilderSpec, PythonSource
from nightly.core.suites import SUITE_PYTHON
from nightly.errors import NightlyError
from nightly.images import sysroot, zig

Log = Callable[[str], None]

TOOLS_PREFIX = "/opt/nightly-tools"
INTERPRETER_PACKAGES = ("setuptools", "wheel")

# Paths (relative to lib/pythonX.Y) a build never needs.
_DROP_STDLIB = re.compile(
    r"^(test|idlelib|tkinter|turtledemo|lib2to3/tests|unittest/test|ctypes/test|"
    r"distutils/tests|sqlite3/test|tkinter/test|config-[^/]*/libpython[^/]*\.a)(/|$)"
)
_KEEP_SITE = re.compile(r"^(pip|pip-[^/]*\.dist-info)(/|$)")


class ContextError(NightlyError):
    """An interpreter or wheel could not be put into a build context."""


def _keep(rel: str, version: str) -> bool:
    """Whether a path relative to an interpreter's root goes into the image."""
    parts = rel.split("/")
    if "__pycache__" in parts or rel.startswith("share/man"):
        return False
    stdlib = f"lib/python{version}/"
    if rel.startswith(stdlib):
        inner = rel[len(stdlib):]
        if inner.startswith("site-packages/"):
            return bool(_KEEP_SITE.match(inner[len("site-packages/"):]))
        return not _DROP_STDLIB.match(inner)
    return True


def _add_tree(tar: tarfile.TarFile, root: Path, arc: str, version: str, strip: int = 0) -> int:
    """Add an interpreter folder under `arc`; returns the bytes added."""
    total = 0
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if not _keep(rel, version):
            continue
        info = tar.gettarinfo(str(path), arcname=f"{arc}/{rel}")
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        if info.isreg():
            with path.open("rb") as f:
                tar.addfile(info, f)
            total += info.size
        elif info.isdir() or info.issym():
            tar.addfile(info)
    return total


def _add_archive(tar: tarfile.TarFile, archive: Path, arc: str, version: str) -> int:
    """Re-root an install_only archive (top folder `python/`) under `arc`."""
    total = 0
    with tarfile.open(archive) as src:
        for info in src:
            name = info.name.split("/", 1)[1] if "/" in info.name else ""
            if not name or not _keep(name, version) or not (info.isreg() or info.isdir()
                                                             or info.issym()):
                continue
            info.name = f"{arc}/{name}"
            info.uid = info.gid = 0
            data = src.extractfile(info) if info.isreg() else None
            tar.addfile(info, data)
            total += info.size if info.isreg() else 0
    return total


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def download(requirements: list[str], python: str, dest: Path, log: Log) -> Path:
    """Wheels of the requirements for CPython `python` on x86_64 Linux, cached in dest."""
    marker = dest / ".nightly-complete"
    want = "\n".join(sorted(requirements)) + "\n"
    if marker.exists() and marker.read_text() == want:
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    log(f"pip download {' '.join(requirements)} for Python {python}")
    procs.run(procs.pip_download(
        dest, "--quiet", "--platform", "manylinux2014_x86_64", "--platform",
        "manylinux_2_28_x86_64", "--python-version", python, "--implementation", "cp",
        *requirements), f"pip download {' '.join(requirements)}", error=ContextError, tail=10)
    marker.write_text(want)
    return dest


def _python_steps(p: PythonSource) -> list[str]:
    py = f"{p.dest}/bin/python{p.version}"
    wheels = f"/tmp/ctx/wheels/py{p.version}"
    steps = []
    if p.kind == "distro":
        steps.append(f"python{p.version} -m venv --system-site-packages {p.dest}")
    else:
        # Copied interpreters carry their build's RUNPATH (/root/.pyenv/...); point it at
        # their own lib folder, wherever they are now.
        steps.append(
            f"if patchelf --print-rpath {py} | grep -q .; then "
            f"patchelf --set-rpath '$ORIGIN/../lib' {py}; fi"
        )
    steps.append(f"{p.dest}/bin/python -m pip install -q --no-index --no-warn-script-location "
                 f"--find-links {wheels} {' '.join(INTERPRETER_PACKAGES)}")
    steps.append(f"{p.dest}/bin/python -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib, venv'")
    return steps


def _env_line(env: dict[str, str]) -> str:
    return "ENV " + " ".join(f"{k}={_quote(v)}" for k, v in sorted(env.items()))


# The toolchain's self-test in the image: a threaded C program and a C++ one link against
# the sysroot's glibc (no symbol newer than it) and run.
TOOLCHAIN_SELFTEST = (
    "printf '#include <pthread.h>\\nstatic void *f(void *a){return a;}\\nint main(void)"
    "{pthread_t t; pthread_create(&t,0,f,0); return pthread_join(t,0);}\\n' > /tmp/t.c"
    " && $CC /tmp/t.c -pthread -o /tmp/t && /tmp/t"
    " && printf '#include <vector>\\nint main(){std::vector<int> v(3); return v[0];}\\n'"
    " > /tmp/t.cpp && $CXX /tmp/t.cpp -o /tmp/t && /tmp/t && rm -f /tmp/t /tmp/t.c /tmp/t.cpp"
)


def cpu_dockerfile(spec: BuilderSpec, labels: dict[str, str]) -> str:
    lines = [f"FROM {spec.base_tag()}"]
    lines += [f"COPY pythons/{p.tag} {p.dest}" for p in spec.pythons if p.kind != "distro"]
    if spec.pythons or spec.pip_tools:
        lines.append("COPY wheels /tmp/ctx/wheels")
    run = [
        # Every builder image compiles C and C++ (a base image may lack them).
        "for c in gcc g++; do command -v $c >/dev/null || { echo \"the base has no $c: "
        "add it to packages (or to the base image)\" >&2; exit 1; }; done",
    ]
    for p in spec.pythons:
        run += _python_steps(p)
    if spec.pip_tools:
        run.append(f"python3 -m venv {TOOLS_PREFIX}")
        run.append(f"{TOOLS_PREFIX}/bin/python -m pip install -q --no-index --find-links "
                   f"/tmp/ctx/wheels/tools {' '.join(repr(t) for t in spec.pip_tools)}")
    run.append("rm -rf /tmp/ctx")
    lines.append("RUN set -e; " + "; ".join(run))
    if spec.toolchain in ("sysroot", "zig"):
        # Every compiler a build uses links against the sysroot's glibc (the policy's). A
        # zig builder has it too: its CUDA images compile with it (nvcc rejects libc++).
        lines.append(f"COPY toolchain {sysroot.IMAGE_PATH}")
        lines.append(_env_line(sysroot.toolchain_env(f"{sysroot.IMAGE_PATH}/bin")))
        lines.append(f"RUN set -e; {TOOLCHAIN_SELFTEST}")
    if spec.toolchain == "zig":
        lines += zig.dockerfile_lines(spec.zig_glibc(), _env_line)
    # The tool environment first: its python3 is the suite's with the tools importable
    # (the conda recipe looks for py-rattler-build there); build interpreters are found
    # under /opt/python by the recipes.
    lines.append(f"ENV PATH={TOOLS_PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                 "/usr/bin:/sbin:/bin")
    lines.append(_label_line(labels))
    return "\n".join(lines) + "\n"


def _label_line(labels: dict[str, str]) -> str:
    return "LABEL " + " ".join(f"{k}={_quote(v)}" for k, v in sorted(labels.items()))


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_cpu_context(spec: BuilderSpec, labels: dict[str, str], cache: Path, dest: Path,
                      log: Log) -> Path:
    """The context tar of the interpreters-and-tools layer."""
    tool_python = SUITE_PYTHON[spec.suite]
    with tarfile.open(dest, "w") as tar:
        _add_bytes(tar, "Dockerfile", cpu_dockerfile(spec, labels).encode())
        for p in spec.pythons:
            wheels = download(list(INTERPRETER_PACKAGES), p.version,
                              cache / "wheels" / f"py{p.version}", log)
            for w in sorted(wheels.glob("*.whl")):
                tar.add(str(w), arcname=f"wheels/py{p.version}/{w.name}")
            arc = f"pythons/{p.tag}"
            if p.kind == "host":
                root = Path(p.path)
                if not (root / "bin" / f"python{p.version}").exists():
                    raise ContextError(
                        f"Python {p.version}: {root}/bin/python{p.version} does not exist "
                        "(the spec's host: path must be an interpreter's install folder)"
                    )
                size = _add_tree(tar, root, arc, p.version)
                log(f"Python {p.version}: {size / 1e6:.0f} MB copied from {root}")
            elif p.kind == "archive":
                if not Path(p.path).is_file():
                    raise ContextError(f"Python {p.version}: archive {p.path} does not exist")
                size = _add_archive(tar, Path(p.path), arc, p.version)
                log(f"Python {p.version}: {size / 1e6:.0f} MB from {p.path}")
        if spec.pip_tools:
            wheels = download(list(spec.pip_tools), tool_python, cache / "wheels" / "tools", log)
            for w in sorted(wheels.glob("*.whl")):
                tar.add(str(w), arcname=f"wheels/tools/{w.name}")
        if spec.toolchain in ("sysroot", "zig"):
            add_toolchain(tar, spec, cache, log)
        if spec.toolchain == "zig":
            zig.add_to_context(tar, cache, log)
    return dest


def add_toolchain(tar: tarfile.TarFile, spec: BuilderSpec, cache: Path, log: Log) -> None:
    """The sysroot (assembled in the cache) and wrappers for the image's own compilers
    (gcc, g++, and each declared g++-N as gccN/)."""
    import tempfile

    toolchain = sysroot.assemble(cache, mirror=spec.mirror, log=log)

    def owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    tar.add(str(toolchain / "sysroot"), arcname="toolchain/sysroot", filter=owner)
    tar.add(str(toolchain / "lib"), arcname="toolchain/lib", filter=owner)
    gccs = {f"gcc{c.split('-', 1)[1]}": f"-{c.split('-', 1)[1]}"
            for c in spec.compilers if re.match(r"^g\+\+-\d+$", c)}
    with tempfile.TemporaryDirectory(prefix="nightly-wrappers-") as t:
        sysroot.write_wrappers(Path(t), gccs)
        for d in sorted(Path(t).iterdir()):
            tar.add(str(d), arcname=f"toolchain/{d.name}", filter=owner)


def cuda_toolchain_env(spec: BuilderSpec, cuda: str) -> dict[str, str]:
    """nvcc's host compiler in a CUDA image with the sysroot toolchain: the wrappers of the
    gcc its CUDA accepts (gcc11/ for CUDA 11). A zig builder's CUDA images compile C and
    C++ with the sysroot too (one C++ runtime beside nvcc's code: libstdc++)."""
    if spec.toolchain_for(cuda) != "sysroot":
        return {}
    env = sysroot.toolchain_env(f"{sysroot.IMAGE_PATH}/bin", cuda_gcc=spec.host_gcc_for(cuda))
    if spec.toolchain == "zig":
        return env
    return {k: env[k] for k in ("CUDAHOSTCXX", "NVCC_CCBIN")}


SELFTEST = r"""set -e
cd "$(mktemp -d)"
cat > k.cu <<'EOF'
#include <cuda_runtime.h>
__global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }
extern "C" int runtime_version(void) { return CUDART_VERSION; }
extern "C" void launch(const float* a, const float* b, float* c, int n) {
  add<<<(n + 255) / 256, 256>>>(a, b, c, n); }
EOF
nvcc --version
nvcc -Xcompiler -fPIC -c k.cu -o k.o
g++ -shared -o libk.so k.o -L/usr/local/cuda/lib64 -lcudart
echo "CUDA self-test passed: nvcc -c + g++ -shared -lcudart"
"""


def cuda_dockerfile(parent: str, version: str, labels: dict[str, str],
                    env: dict[str, str] | None = None) -> str:
    lines = [
        f"FROM {parent}",
        *([_env_line(env)] if env else []),  # before the self-test: nvcc's host compiler
        f"COPY cuda-{version} /usr/local/cuda-{version}",
    ]
    host = (env or {}).get("NVCC_CCBIN", "")
    if host and version.startswith("11."):
        # The toolkit's hostcc/ wrappers (gcc-11 for CUDA 11's nvcc, found through
        # nvcc.profile's PATH) become the sysroot's too, whether or not this nvcc reads
        # NVCC_CCBIN.
        hostcc = f"/usr/local/cuda-{version}/hostcc"
        lines.append(
            f"RUN for t in gcc g++; do printf '#!/bin/sh\\nexec {host.rsplit('/', 1)[0]}/%s"
            f" \"$@\"\\n' $t > {hostcc}/$t; chmod 755 {hostcc}/$t; done")
    lines += [
        "COPY selftest.sh /tmp/cuda-selftest.sh",
        # The runtime on the loader's path, as in NVIDIA's own images: ldd (the libtorch
        # recipe's dependency search) and programs built here find libcudart.
        f"RUN ln -sfn cuda-{version} /usr/local/cuda "
        "&& echo /usr/local/cuda/lib64 > /etc/ld.so.conf.d/nightly-cuda.conf && ldconfig "
        "&& PATH=/usr/local/cuda/bin:$PATH bash /tmp/cuda-selftest.sh "
        "&& rm -f /tmp/cuda-selftest.sh",
        f"ENV PATH={TOOLS_PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:"
        "/bin:/usr/local/cuda/bin",
    ]
    lines.append(_label_line(labels))
    return "\n".join(lines) + "\n"


def write_cuda_context(parent: str, version: str, prefix: Path, labels: dict[str, str],
                       dest: Path, env: dict[str, str] | None = None) -> Path:
    with tarfile.open(dest, "w") as tar:
        _add_bytes(tar, "Dockerfile", cuda_dockerfile(parent, version, labels, env).encode())
        _add_bytes(tar, "selftest.sh", SELFTEST.encode(), 0o755)

        def owner(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            if info.name.endswith(".nightly-complete"):
                return None
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            return info

        tar.add(str(prefix), arcname=f"cuda-{version}", filter=owner)
    return dest
