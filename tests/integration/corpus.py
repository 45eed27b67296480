"""The corpus: real open-source projects, built from their PyPI sdists by nightly.

Each project has a nightly config in configs/corpus/<key>.toml whose `source` is the
unpacked sdist under ~/.cache/nightly/corpus/src/. This module fetches the sdists (checked
against their sha256), unpacks them there, runs a project's own test suite against an
installed wheel, and records the figures docs/building.md's table shows.

    python -m tests.integration.corpus fetch [KEY...]   download and unpack (all by default)
    python -m tests.integration.corpus table            the results as docs/building.md's table
    python -m tests.integration.corpus policy-table     the builds in the builder image (policy 2_28)
    python -m tests.integration.corpus cairo-image      pycairo's base image: the cairo stack
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs" / "corpus"
CACHE = Path.home() / ".cache" / "nightly" / "corpus"
PYPI_JSON = "https://pypi.org/pypi/{name}/json"
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
DATE = "2026_11_21"
DEV = ".dev20261121"


@dataclass(frozen=True, kw_only=True)
class Project:
    key: str  # configs/corpus/<key>.toml
    dist: str
    version: str
    sha256: str
    backend: str
    import_name: str
    # The version its wheels must carry on DATE (version_from decides).
    wheel_version: str
    test_paths: tuple[str, ...] = ("tests",)
    test_requires: tuple[str, ...] = ()
    pytest_args: tuple[str, ...] = ()
    conda_check: str = ""  # code run after a py-rattler install; "" = no conda package
    container: bool = False
    apt: tuple[str, ...] = field(default=())  # Debian packages its build needs
    # The C libraries its container builds need, built for the policy into a base image
    # ("cairo": tests/integration/cairo_stack.py) instead of taken from `apt`: Debian's are
    # linked against a glibc newer than manylinux_2_28 allows. "" = none.
    stack: str = ""

    @property
    def config(self) -> Path:
        return CONFIGS / f"{self.key}.toml"

    @property
    def sdist(self) -> str:
        return f"{self.dist}-{self.version}.tar.gz"

    @property
    def source(self) -> Path:
        return CACHE / "src" / f"{self.dist}-{self.version}"


PROJECTS = (
    Project(
        key="markupsafe", dist="markupsafe", version="3.0.2",
        sha256="ee55d3edf80167e48ea11a923c7386f4669df67d7994554387f84e7d8b0a2bf0",
        backend="setuptools (C extension)", import_name="markupsafe", wheel_version="3.0.2",
        conda_check="import markupsafe; assert str(markupsafe.escape('<a>')) == '&lt;a&gt;'",
        container=True,
    ),
    Project(
        key="ujson", dist="ujson", version="6.1.0",
        sha256="aef7ea4cd9e2e9f8a35c4538a9780d58c80d76c5da66a8dad269b4cc6d930c29",
        backend="setuptools + setuptools-scm (C/C++ extension)", import_name="ujson",
        wheel_version="6.1.0" + DEV,
        conda_check="import ujson; assert ujson.loads(ujson.dumps({'a': [1, 2.5]})) == {'a': [1, 2.5]}",
    ),
    Project(
        key="frozenlist", dist="frozenlist", version="1.8.0",
        sha256="3ede829ed8d842f6cd48fc7081d7a41001a56f1f38603f9d49bf3020d59a31ad",
        backend="Cython (in-tree setuptools backend)", import_name="frozenlist",
        wheel_version="1.8.0",
    ),
    Project(
        key="mapbox-earcut", dist="mapbox_earcut", version="1.0.3",
        sha256="b6bac5d519d9947a6321a699c15d58e0b5740da61b9210ed229e05ad207c1c04",
        backend="scikit-build-core + pybind11 (CMake, C++)", import_name="mapbox_earcut",
        wheel_version="1.0.3", test_requires=("numpy",),
    ),
    Project(
        key="pycairo", dist="pycairo", version="1.29.0",
        sha256="f3f7fde97325cae80224c09f12564ef58d0d0f655da0e3b040f5807bd5bd3142",
        backend="meson-python (C extension, system cairo)", import_name="cairo",
        wheel_version="1.29.0", apt=("libcairo2-dev", "pkg-config"),
        # In the builder image, not bookworm's libcairo2-dev (libcairo, libX11...: GLIBC_2.34
        # -2.35; bullseye's would still need 2.29 for pow, exp): auditwheel bundles what the
        # build links, so cairo is built from source for glibc 2.17 into the base image.
        stack="cairo",
    ),
    Project(
        key="setproctitle", dist="setproctitle", version="1.3.8",
        sha256="cafe209d064a6efb88cb45a03e97981ff8832802b2b5d009dde0197a3b7b41c8",
        backend="setup.py only (PEP 517 fallback to setuptools)", import_name="setproctitle",
        wheel_version="1.3.8",
        # The `embedded` tests compile a C program against the interpreter's headers and
        # libpython, which pyenv builds do not ship as a shared library.
        pytest_args=("-m", "not embedded"),
        container=True,
    ),
)
# Projects only `nightly init` meets (tests/integration/test_init.py): no config of their
# own under configs/corpus, not in the corpus table.
INIT_ONLY = (
    Project(
        key="cmarkgfm", dist="cmarkgfm", version="2025.10.22",
        sha256="5bec61007b65b919488442c838c58a6c8bf4741f5103c593b2ef180d39818eda",
        backend="setuptools + cffi (C library, API mode)", import_name="cmarkgfm",
        wheel_version="2025.10.22", test_requires=("cffi",),
    ),
)
BY_KEY = {p.key: p for p in (*PROJECTS, *INIT_ONLY)}


# The projects built in containers of the corpus builder image by every test run (one C
# extension with setuptools, one C++ one with CMake); NIGHTLY_CORPUS_CONTAINER=all builds
# every project that way (docs/building.md records that run).
CONTAINER_KEYS = (
    tuple(p.key for p in PROJECTS) if os.environ.get("NIGHTLY_CORPUS_CONTAINER") == "all"
    else ("markupsafe", "mapbox-earcut")
)
# Where the corpus builder image is declared (its [images] and [builders.corpus] tables).
BUILDER_EXAMPLE = CONFIGS / "markupsafe-offline.toml"
# The Pythons each run builds a project for in the builder image (default: every one).
# markupsafe takes each of the image's interpreters; mapbox-earcut (C++ with CMake, the
# slowest night of the suite: 504 s for four Pythons in docs/building.md's table) the
# oldest and the newest: what is C++ about a build in the image (the sysroot's g++, libstdc++
# linked statically, the policy) does not change with the Python between them, whose
# builds markupsafe's nights (in the image) and test_corpus_project (on the host, with the
# project's tests on every Python) cover. NIGHTLY_CORPUS_CONTAINER=all builds every
# project on every Python, as docs/building.md records.
CONTAINER_PYTHONS: dict[str, tuple[str, ...]] = (
    {} if os.environ.get("NIGHTLY_CORPUS_CONTAINER") == "all"
    else {"mapbox-earcut": (PYTHONS[0], PYTHONS[-1])}
)


def container_pythons(key: str) -> tuple[str, ...]:
    return CONTAINER_PYTHONS.get(key, PYTHONS)


def container_config(project: Project, base_image: str = "", runtime_image: str = "",
                     pythons: tuple[str, ...] = PYTHONS) -> str:
    """The project's config with its manywheels built in containers of the corpus builder
    image (manylinux = "2_28"), as configs/corpus/markupsafe-offline.toml declares it, plus
    the Debian packages the project builds against; conda packages left out; its
    manywheels for `pythons`. With `base_image` (a project's `stack`), the builder's layers
    go on that image instead of the debootstrapped base, and its wheels are tested in
    `runtime_image`."""
    text = project.config.read_text()
    assert 'executor = "local"' in text, project.config
    text = text.replace('executor = "local"', 'executor = "container"')
    every = f"pythons = [{', '.join(f'{xy!r}' for xy in PYTHONS)}]".replace("'", '"')
    assert every in text, project.config
    text = text.replace(every, f"pythons = [{', '.join(f'{xy!r}' for xy in pythons)}]"
                        .replace("'", '"'), 1)
    if "[matrix.linux.conda]" in text:
        start = text.index("[matrix.linux.conda]")
        text = text[:start] + text[text.index("\n\n", start) + 2:]
    example = BUILDER_EXAMPLE.read_text()
    tables = example[example.index("[images]"):example.index("[[machines]]")]
    if base_image:
        # The base image is the whole base layer: a suite's packages have no say in it.
        kept = [line for line in tables.splitlines()
                if not line.startswith(("suite =", "packages =", "compilers ="))]
        tables = "\n".join(kept).replace(
            'repository = "nightly-builder"\n',
            f'repository = "nightly-builder-{project.stack}"\nbase_image = "{base_image}"\n'
            f'runtime_image = "{runtime_image}"\n', 1) + "\n"
        assert base_image in tables, tables
    elif project.apt:
        tables = tables.replace("packages = [", "packages = [" + "".join(
            f'"{deb}", ' for deb in project.apt), 1)
    return text + "\n" + tables


def corpus_runtime_image() -> str:
    """nightly's runtime image of the corpus builder (the pyenv interpreters on a minbase,
    no compilers, no -dev packages): where a `stack` project's wheels are tested."""
    from nightly.config.reader import read_toml
    from nightly.core.specparse import parse_spec
    from nightly.images import runtime

    example: dict[str, Any] = read_toml(BUILDER_EXAMPLE)[0]
    table = example["builders"]["corpus"]
    return runtime.tag(parse_spec("corpus", table))


def auditwheel_verdict(wheel: Path) -> str:
    """The platform tag `auditwheel show` says the wheel is consistent with."""
    import re

    auditwheel = Path(sys.executable).parent / "auditwheel"
    out = subprocess.run([str(auditwheel), "show", str(wheel)], capture_output=True, text=True,
                         check=True).stdout
    found = re.search(r'consistent with\s+the following platform tag:\s+"([^"]+)"', out)
    assert found, out
    return found.group(1)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download_checked(url: str, dest: Path, sha256: str) -> Path:
    """`url` saved at `dest` (through a .part file) when its bytes have this sha256; a wrong
    sha256 raises and the download is dropped."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_suffix(".part")
    with urllib.request.urlopen(url, timeout=300) as r, part.open("wb") as f:
        shutil.copyfileobj(r, f)
    got = sha256_of(part)
    if got != sha256:
        part.unlink()
        raise RuntimeError(f"{url}: sha256 {got}, expected {sha256}")
    part.replace(dest)
    return dest


def _lock(name: str) -> AbstractContextManager[None]:
    """One writer at a time of a cache entry: the tests that share an sdist may run at once
    on two xdist workers (tests/support/schedule.py)."""
    from tests.support.runcache import locked

    return locked(CACHE / "locks" / f"{name}.lock")


def fetch(project: Project) -> Path:
    """The project's sdist in the cache, downloaded from PyPI when missing. Raises on any
    failure (a failed download fails the test that needs it)."""
    with _lock(f"sdist-{project.key}"):
        return _fetch(project)


def _fetch(project: Project) -> Path:
    dest = CACHE / "sdists" / project.sdist
    if dest.is_file() and sha256_of(dest) == project.sha256:
        return dest
    url = PYPI_JSON.format(name=project.dist)
    with urllib.request.urlopen(url, timeout=120) as r:
        meta = json.load(r)
    files = [f for f in meta["releases"].get(project.version, []) if f["packagetype"] == "sdist"]
    if not files:
        raise RuntimeError(f"PyPI has no sdist of {project.dist} {project.version}")
    download_checked(urllib.parse.urljoin(url, files[0]["url"]), dest, project.sha256)
    return dest


def unpack(project: Project) -> Path:
    """The unpacked sdist at project.source (the config's `source`), made once."""
    archive = fetch(project)
    with _lock(f"src-{project.key}"):
        return _unpack(project, archive)


def _unpack(project: Project, archive: Path) -> Path:
    marker = project.source / ".corpus-sha256"
    if marker.is_file() and marker.read_text() == project.sha256:
        return project.source
    shutil.rmtree(project.source, ignore_errors=True)
    tmp = project.source.with_name(project.source.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
    (tmp / project.source.name).replace(project.source)
    tmp.rmdir()
    marker.write_text(project.sha256)
    return project.source


@dataclass
class TestRun:
    python: str
    passed: int
    failed: int
    errors: int
    skipped: int
    module_file: str
    output: str
    venv_python: Path  # the venv the wheel was installed into and tested in


def run_own_tests(project: Project, python: Path, index_url: str, work: Path) -> TestRun:
    """Install the project's wheel from the index into a fresh venv of `python`, then run
    the tests shipped in its sdist against it (from a copy, so only the installed package
    can be imported)."""
    work.mkdir(parents=True)
    venv = work / "venv"
    # No pip of its own (ensurepip costs seconds): the test runner's pip drives it. Not the
    # interpreter's own: pyenv's 3.10 has pip 23.0.1, which rejects the mirror's PEP 658
    # metadata files of projects whose metadata spells their name with capitals
    # ("inconsistent Name: expected 'markupsafe', but metadata has 'MarkupSafe'").
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(venv)], check=True)
    vpy = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(vpy), "install", "-q",
           "--disable-pip-version-check"]
    _check_run(
        [*pip, "--no-deps", "--index-url", index_url, f"{project.dist}=={project.wheel_version}"]
    )
    wheels = test_wheels(python, ("pytest", *project.test_requires))
    _check_run([*pip, "--no-index", "--find-links", str(wheels), "pytest",
                *project.test_requires])
    tests = work / "tests"
    tests.mkdir()
    for rel in project.test_paths:
        src = project.source / rel
        if src.is_dir():
            shutil.copytree(src, tests / src.name)
        else:
            shutil.copy2(src, tests / src.name)
    (work / "pytest.ini").write_text("[pytest]\n")
    junit = work / "junit.xml"
    proc = subprocess.run(
        [str(vpy), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(work / "pytest.ini"),
         "--rootdir", str(work), f"--junitxml={junit}", *project.pytest_args, str(tests)],
        cwd=work, capture_output=True, text=True, env={**_clean_env(), "PYTHONHASHSEED": "0"},
    )
    where = subprocess.run(
        [str(vpy), "-c", f"import {project.import_name} as m; print(m.__file__)"],
        cwd=work, capture_output=True, text=True, check=True,
    ).stdout.strip()
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    total, failed, errors, skipped = (
        int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")
    )
    return TestRun(
        python=python.name, passed=total - failed - errors - skipped, failed=failed,
        errors=errors, skipped=skipped, module_file=where, output=proc.stdout + proc.stderr,
        venv_python=vpy,
    )


def _check_run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")


def test_wheels(python: Path, requirements: tuple[str, ...]) -> Path:
    """A folder of wheels of the test tools for this interpreter, downloaded once (from
    the host's pip configuration) and kept in the cache."""
    xy = subprocess.run(
        [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    key = hashlib.sha256(" ".join(sorted(requirements)).encode()).hexdigest()[:12]
    dest = CACHE / "test-wheels" / f"py{xy}-{key}"
    with _lock(dest.name):
        if (dest / ".complete").is_file():
            return dest
        _download(python, dest, requirements)
    return dest


def _download(python: Path, dest: Path, requirements: tuple[str, ...]) -> None:
    _check_run([str(python), "-m", "pip", "download", "-q", "--disable-pip-version-check",
                "--only-binary", ":all:", "-d", str(dest), *requirements])
    (dest / ".complete").write_text("\n".join(requirements))


def _clean_env() -> dict[str, str]:
    keep = ("HOME", "LANG", "PATH", "PIP_CACHE_DIR")
    return {k: os.environ[k] for k in keep if k in os.environ}


def record(key: str, figures: dict[str, object]) -> None:
    """Merge figures into CACHE/results.json (the source of docs/building.md's table)."""
    path = CACHE / "results.json"
    with _lock("results"):
        data = json.loads(path.read_text()) if path.is_file() else {}
        data.setdefault(key, {}).update(figures)
        path.write_text(json.dumps(data, indent=2, sort_keys=True))


def table() -> str:
    """results.json as a Markdown table: project, backend, Pythons, tags, tests, build time."""
    data = json.loads((CACHE / "results.json").read_text())
    rows = [
        "| project | build backend | Pythons built | wheel tags | tests passed (skipped) "
        "per Python | build time per wheel | night (wall) | also |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in PROJECTS:
        r = data.get(p.key)
        if not r:
            rows.append(f"| {p.dist} {p.version} | {p.backend} | not run | | | | | |")
            continue
        tests = ", ".join(f"{xy}: {n} ({sk})" for xy, (n, sk) in sorted(r["tests"].items()))
        wheel_s = [s for b, s in r["build_s"].items() if b.startswith("manywheel")]
        also = []
        if "conda" in r:
            also.append("conda (py-rattler)")
        if "container" in r:
            c = r["container"]
            also.append(f"container + wheelhouse: {c['tests'][0]} passed, {c['night_s']:.0f} s")
        rows.append(
            f"| {p.dist} {r['version']} | {p.backend} | {', '.join(r['pythons'])} | "
            f"{'; '.join(r['wheel_tags'])} | {tests} | "
            f"{min(wheel_s):.0f}-{max(wheel_s):.0f} s | {r['night_s']:.0f} s | {'; '.join(also)} |"
        )
    return "\n".join(rows)


def policy_table() -> str:
    """The builds in the corpus builder image (manylinux = "2_28") from results.json: the
    tags, auditwheel's verdicts and the tests per project."""
    data = json.loads((CACHE / "results.json").read_text())
    rows = ["| project | wheel tags (Python 3.10-3.13) | `auditwheel show` | tests passed "
            "(skipped) per Python | night (wall) |", "| --- | --- | --- | --- | --- |"]
    for p in PROJECTS:
        r = data.get(p.key, {}).get("builder_image")
        if not r:
            rows.append(f"| {p.dist} {p.version} | not run | | | |")
            continue
        tags = sorted({t for t, _ in r["tags"].values()})
        verdicts = sorted({v for _, v in r["tags"].values()})
        tests = ", ".join(f"{xy}: {n} ({sk})" for xy, (n, sk) in sorted(r["tests"].items()))
        rows.append(f"| {p.dist} {p.version} | {'; '.join(tags)} | {'; '.join(verdicts)} | "
                    f"{tests} | {r['night_s']:.0f} s |")
    return "\n".join(rows)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "fetch":
        for key in sys.argv[2:] or list(BY_KEY):
            print(unpack(BY_KEY[key]))
    elif sys.argv[1:] == ["table"]:
        print(table())
    elif sys.argv[1:] == ["policy-table"]:
        print(policy_table())
    elif sys.argv[1:] == ["cairo-image"]:
        import docker

        from tests.integration import cairo_stack

        tag, figures = cairo_stack.ensure_image(docker.from_env())
        print(tag, figures or "(present)")
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
