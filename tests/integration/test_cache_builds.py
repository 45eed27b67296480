"""The compiler cache for real: `nightly run` builds with sccache in front of gcc and nvcc,
locally (the demo project with the real recipes), in containers (Podman) and on a Dask
cluster sharing an S3 cache on moto.

Correctness first: a cache hit never hides a source change, objects compiled for one CUDA
version are never used for another, and a cache that cannot be reached never fails a build.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cuda_prefix import make_cuda_prefix
from tests.support.engine import Engine
from tests.support.net import free_port
from tests.support.s3 import moto_server

REPO = Path(__file__).resolve().parents[2]
NVCC_13_0 = Path("/usr/local/cuda-13.0")
ACCESS_KEY = "AKIANIGHTLYCACHEKEY7"
SECRET_KEY = "nightly-cache-secret-DO-NOT-PRINT"
RunCli = Callable[..., tuple[int, str, str]]
# These recipes are the tests' own: as root they may run as root (nightly/hardening.py).
ROOT_OPT_IN = "root" if os.geteuid() == 0 else ""

# A recipe that compiles like a project's build does: $CC -c for C, a CMake launcher call
# for C++ (what CMake does with CMAKE_CXX_COMPILER_LAUNCHER), then packs the objects.
COMPILE_RECIPE = r"""#!/usr/bin/env bash
set -euo pipefail
w="$WORK_DIR/b"; mkdir -p "$w"; cd "$w"
cp "$SOURCE_DIR"/*.c "$SOURCE_DIR"/*.cpp .
for f in *.c; do ${CC:-cc} -O1 -c "$f" -o "${f%.c}.o"; done
for f in *.cpp; do ${CMAKE_CXX_COMPILER_LAUNCHER:-} c++ -O1 -c "$f" -o "${f%.cpp}.o"; done
env > "$OUTPUT_DIR/../recipe.env"
# Packed reproducibly: builds of one night deliver one file name, so its bytes must be one set
# (identical objects give identical archives: one package recorded for each build).
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - *.o \
  | gzip -n > "$OUTPUT_DIR/objs-$BUILD_VERSION.tar.gz"
"""


# The cache's store is per project and toolchain: <base>/<project>-<hash of name and root>/<toolchain>
# (nightly/builds/cache/store.py, namespace).
_NS = r"[a-z0-9._-]+-[0-9a-f]{10}"


def store_of(base: str, toolchain: str) -> re.Pattern[str]:
    """The `where` of a build's cache: BASE/<project namespace>/TOOLCHAIN."""
    return re.compile(re.escape(base) + "/" + _NS + "/" + re.escape(toolchain))


def store_dir(base: Path, toolchain: str) -> Path:
    """The one store folder of `toolchain` under `base` (one project per test)."""
    (found,) = [d for d in base.iterdir() if re.fullmatch(_NS, d.name) and (d / toolchain).is_dir()]
    return found / toolchain


def write_sources(src: Path, n: int = 3) -> None:
    src.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (src / f"f{i}.c").write_text(f"int f{i}(int x) {{ return x * {i + 2}; }}\n")
    (src / "g.cpp").write_text("#include <vector>\nint g() { return std::vector<int>(3).size(); }\n")


def config_text(src: Path, *, matrix: str, extra: str = "", executor: str = "local",
                recipes: Path | None = None) -> str:
    return f"""
root = "nightlies"
recipes = "{recipes or REPO / 'recipes'}"

[project]
name = "nightlydemo"
source = "{src}"
base_version = "0.1.0"

{matrix}

[[machines]]
name = "m"
platform = "linux"
queues = 1
executor = "{executor}"

[executor.local]
user = "{ROOT_OPT_IN}"

{extra}
"""


def cache_entries(day: Path) -> dict[str, dict[str, Any]]:
    builds = json.loads((day / "state.json").read_text())["builds"]
    return {bid: e for bid, e in builds.items()}


def night(run_cli: RunCli, config: Path, date: str, env: dict[str, str] | None = None) -> Path:
    code, out, err = run_cli(["run", "--config", str(config), "--date", date],
                             cwd=config.parent, env=env, timeout=900)
    day = config.parent / "nightlies" / date
    logs = "".join(p.read_text() for p in (day / "logs").rglob("*.log")) if day.exists() else ""
    assert code == 0, out + err + logs[-6000:]
    return day


def extension_bytes(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.startswith("nightlydemo/_native") and n.endswith(".so")]
        return z.read(name)


# ---------------------------------------------------------------------------- local, demo


@pytest.mark.slow
def test_a_cache_hit_never_hides_a_source_change(tmp_path: Path, run_cli: RunCli) -> None:
    """Night 1 compiles native.c and kernel.cu (nvcc 13.0) into the cache; native.c is edited;
    night 2 takes kernel.cu from the cache, compiles native.c again, and its smoke test sees
    the new behaviour."""
    src = tmp_path / "demo"
    shutil.copytree(REPO / "examples" / "demo", src)
    cache_dir = tmp_path / "sccache"

    def write(expect: int) -> Path:
        config = tmp_path / "nightly.toml"
        config.write_text(config_text(src, matrix="""
[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["13.0"]
""", extra=f"""
[executor.local.cuda]
"cu130" = "{NVCC_13_0}"

[smoke]
command = '"$PYTHON" -c "import nightlydemo; r = nightlydemo.add(2, 3); assert r == {expect}, r"'

[cache]
dir = "{cache_dir}"
"""))
        return config

    day1 = night(run_cli, write(5), "2024_05_01")
    first = cache_entries(day1)["manywheel_3.11_cu130"]["cache"]
    assert (first["hits"], first["misses"]) == (0, 2), first  # native.c, kernel.cu
    assert store_of(f"local disk {cache_dir}", "host-cu130").fullmatch(first["where"]), first
    assert any(store_dir(cache_dir, "host-cu130").rglob("*"))

    native = src / "src" / "native.c"
    native.write_text(native.read_text().replace("PyLong_FromLong(a + b)", "PyLong_FromLong(a + b + 1000)"))
    day2 = night(run_cli, write(1005), "2024_05_02")
    second = cache_entries(day2)["manywheel_3.11_cu130"]
    assert second["status"] == "succeeded"
    assert (second["cache"]["hits"], second["cache"]["misses"]) == (1, 1), second["cache"]
    log = (day2 / second["log"]).read_text()
    assert "smoke: passed" in log
    assert "compiler cache: 1 hits, 1 misses, 2 compile requests (50% hit rate)" in log
    (wheel1,) = (day1 / "packages" / "manywheel" / "cu130").glob("*.whl")
    (wheel2,) = (day2 / "packages" / "manywheel" / "cu130").glob("*.whl")
    assert extension_bytes(wheel1) != extension_bytes(wheel2)


def test_a_cache_hit_never_hides_a_header_change_between_nights(
    tmp_path: Path, run_cli: RunCli
) -> None:
    """A header edited between two nights (its night-1 copy still on disk in night 1's day
    folder) is compiled again: host builds' paths differ every night, and the cache must not
    answer night 2's compile from night 1's header."""
    src = tmp_path / "demo"
    shutil.copytree(REPO / "examples" / "demo", src)
    (src / "src" / "offset.h").write_text("#define DEMO_OFFSET 0\n")
    native = src / "src" / "native.c"
    native.write_text(native.read_text().replace(
        "#include <string.h>", '#include <string.h>\n#include "offset.h"', 1).replace(
        "PyLong_FromLong(a + b)", "PyLong_FromLong(a + b + DEMO_OFFSET)"))
    cache_dir = tmp_path / "sccache"

    def commit(message: str, when: str) -> None:
        env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
        for args in (["add", "-A"], ["commit", "-q", "-m", message]):
            subprocess.run(["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t",
                            *args], check=True, env=env)

    subprocess.run(["git", "init", "-q", "-b", "main", str(src)], check=True)
    commit("demo", "2024-04-30T12:00:00")

    def write(expect: int) -> Path:
        config = tmp_path / "nightly.toml"
        config.write_text(config_text(src, matrix="""
[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]
""", extra=f"""
[smoke]
command = '"$PYTHON" -c "import nightlydemo; r = nightlydemo.add(2, 3); assert r == {expect}, r"'

[cache]
dir = "{cache_dir}"
"""))
        return config

    night(run_cli, write(5), "2024_05_01")
    (src / "src" / "offset.h").write_text("#define DEMO_OFFSET 1000\n")
    commit("offset 1000", "2024-05-01T12:00:00")
    day2 = night(run_cli, write(1005), "2024_05_02")
    second = cache_entries(day2)["manywheel_3.11_cpu"]
    assert second["status"] == "succeeded", (day2 / second["log"]).read_text()[-3000:]
    assert "smoke: passed" in (day2 / second["log"]).read_text()


@pytest.fixture(scope="session")
def cuda_13_1() -> Path:
    """A second CUDA toolkit (13.1, from NVIDIA's PyPI wheels), cached between runs."""
    return make_cuda_prefix("13.1", Path("/tmp/nightly-cache") / "cuda-13.1")


@pytest.mark.slow
def test_objects_of_one_cuda_version_are_never_used_for_another(
    tmp_path: Path, run_cli: RunCli, cuda_13_1: Path
) -> None:
    """cu130 and cu131 builds of the same sources, one after the other, both warm the second
    night: each takes only its own objects (the demo checks that the kernel it links was
    compiled by the CUDA it is labelled with). Under both, sccache's own keys also tell the
    two nvcc apart when they share one cache folder."""
    src = tmp_path / "demo"
    shutil.copytree(REPO / "examples" / "demo", src)
    cache_dir = tmp_path / "sccache"
    config = tmp_path / "nightly.toml"
    config.write_text(config_text(src, matrix="""
[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["13.0", "13.1"]
""", extra=f"""
[executor.local.cuda]
"cu130" = "{NVCC_13_0}"
"cu131" = "{cuda_13_1}"

[smoke]
# cuda_version() raises when the kernel linked in was compiled by another CUDA than the label
cuda_check = "import nightlydemo; assert nightlydemo.cuda_version() in ('13.0', '13.1')"

[cache]
dir = "{cache_dir}"
"""))
    night(run_cli, config, "2024_05_01")
    day2 = night(run_cli, config, "2024_05_02")
    for cuda in ("cu130", "cu131"):
        e = cache_entries(day2)[f"manywheel_3.11_{cuda}"]
        # kernel.cu and native.c from the cache: host builds run at the same paths every
        # night (the stable build folder, docs/cache.md), so even the C compile, whose flags
        # name its work folder (-ffile-prefix-map, for reproducible packages), hits.
        assert (e["cache"]["hits"], e["cache"]["misses"]) == (2, 0), (cuda, e["cache"])
        assert store_of(f"local disk {cache_dir}", "host-" + cuda).fullmatch(e["cache"]["where"]), e
        (wheel,) = (day2 / "packages" / "manywheel" / cuda).glob("*.whl")
        unpacked = tmp_path / f"unpacked-{cuda}"
        with zipfile.ZipFile(wheel) as z:
            z.extractall(unpacked)
        probe = subprocess.run(
            [str(Path(shutil.which("python3.11") or "/root/.pyenv/versions/3.11.7/bin/python3.11")),
             "-c", "import sys, nightlydemo; sys.stdout.write(nightlydemo.cuda_version())"],
            env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
        assert probe.stdout == {"cu130": "13.0", "cu131": "13.1"}[cuda], probe.stderr

    # sccache itself, one folder for both toolkits: the second nvcc misses, and its object is
    # its own (the runtime version compiled in differs).
    from nightly.builds.cache import wiring as cc
    from nightly.builds.cache.scripts import write_tools

    tools = tmp_path / "tools"
    write_tools(tools)
    (tmp_path / "v.cu").write_text("#include <cuda_runtime.h>\nint v() { return CUDART_VERSION; }\n")
    sock = f"/tmp/nightly-sccache-test-{uuid.uuid4().hex[:8]}.sock"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SCCACHE_DIR": str(tmp_path / "one"),
           "SCCACHE_SERVER_UDS": sock, "NIGHTLY_SCCACHE": str(cc.find_sccache()),
           "NIGHTLY_CACHE": "on", "NIGHTLY_CACHE_TOOLS": str(tools)}
    sccache = str(cc.find_sccache())
    subprocess.run([sccache, "--start-server"], env=env, check=True, capture_output=True)
    try:
        objs = []
        for n, prefix in enumerate((NVCC_13_0, cuda_13_1, NVCC_13_0)):
            obj = tmp_path / f"v{n}.o"
            subprocess.run([str(tools / "launch"), str(prefix / "bin" / "nvcc"), "-c", "v.cu",
                            "-o", str(obj)], cwd=tmp_path, env=env, check=True)
            objs.append(obj.read_bytes())
        stats = json.loads(subprocess.run([sccache, "--show-stats", "--stats-format=json"],
                                          env=env, check=True, capture_output=True).stdout)
    finally:
        subprocess.run([sccache, "--stop-server"], env=env, capture_output=True)
    s = cc.parse_stats(stats, where="")
    assert (s.hits, s.misses) == (1, 2)  # 13.0 miss, 13.1 miss, 13.0 again: hit
    assert objs[0] != objs[1]
    assert objs[0] == objs[2]


def test_a_cuda_kernel_compiled_in_one_build_folder_is_found_for_another(tmp_path: Path) -> None:
    """Each build maps its own folders (-ffile-prefix-map, for reproducible packages); CUDA's
    host compiler gets that map from recipes/common/cuda-host-c++ (NVCC_CCBIN, CUDAHOSTCXX:
    reproducible_flags), not from nvcc's arguments, which the compiler cache hashes. So the
    kernel one Python's build compiled is found by the next build's (another folder), and
    neither object names a build folder."""
    from nightly.builds.cache import wiring as cc

    sccache = str(cc.find_sccache())
    kernel = ('#include <cstdio>\n__global__ void k(float* b) { b[0] = 1; }\n'
              'void where() { std::printf("%s\\n", __FILE__); }\n')
    folders = [tmp_path / f"manywheel_3.1{n}_cu130" for n in (1, 2)]
    sock = f"/tmp/nightly-sccache-test-{uuid.uuid4().hex[:8]}.sock"
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SCCACHE_DIR": str(tmp_path / "c"),
            "SCCACHE_SERVER_UDS": sock, "SCCACHE_BASEDIRS": ":".join(map(str, folders))}
    subprocess.run([sccache, "--start-server"], env=base, check=True, capture_output=True)
    try:
        for work in folders:
            (work / "src").mkdir(parents=True)
            (work / "src" / "k.cu").write_text(kernel)
            script = (f'RECIPE=test; source {REPO}/recipes/common/lib.sh; reproducible_flags; '
                      f'cd "$WORK_DIR/src"; '  # CUDAFLAGS as CMake hands them to nvcc
                      f'"$SCCACHE" {NVCC_13_0}/bin/nvcc ${{CUDAFLAGS:-}} -O2 -arch=sm_75 '
                      f'-c "$WORK_DIR/src/k.cu" -o "$WORK_DIR/k.o"')
            subprocess.run(["bash", "-c", script], check=True,
                           env={**base, "WORK_DIR": str(work), "SOURCE_DIR": str(tmp_path / "source"),
                                "SCCACHE": sccache})
        stats = json.loads(subprocess.run([sccache, "--show-stats", "--stats-format=json"],
                                          env=base, check=True, capture_output=True).stdout)
    finally:
        subprocess.run([sccache, "--stop-server"], env=base, capture_output=True)
    s = cc.parse_stats(stats, where="")
    assert (s.hits, s.misses) == (1, 1), stats  # the second build's kernel: from the cache
    for work in folders:
        obj = (work / "k.o").read_bytes()
        assert b"/nightly/work/src/k.cu" in obj
        assert str(tmp_path).encode() not in obj


# ---------------------------------------------------------------------------- failure modes


def test_an_unreachable_cache_never_fails_a_build_and_credentials_stay_out(
    tmp_path: Path, run_cli: RunCli
) -> None:
    src = tmp_path / "src"
    write_sources(src)
    recipes = tmp_path / "recipes"
    (recipes / "manywheel").mkdir(parents=True)
    (recipes / "manywheel" / "build.sh").write_text(COMPILE_RECIPE)
    config = tmp_path / "nightly.toml"
    config.write_text(config_text(src, recipes=recipes, matrix="""
[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]
""", extra="""
[smoke]
enabled = false

[cache]
url = "s3://nowhere/cache"
endpoint_url = "http://127.0.0.1:9"
"""))
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
           "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    day = night(run_cli, config, "2024_05_01", env=env)
    e = cache_entries(day)["manywheel_3.11_cpu"]
    assert e["status"] == "succeeded"
    assert "sccache server did not start" in e["cache"]["off"]
    assert store_of("s3://nowhere/cache", "host-cpu").fullmatch(e["cache"]["where"]), e
    log = (day / e["log"]).read_text()
    assert "[nightly] compiler cache unavailable, building without it" in log
    assert "note:        compiler cache: off (sccache server did not start" in log
    # The credentials reached the cache through a file, never an environment, the recipe or a log.
    assert "NIGHTLY_CACHE_CREDENTIALS=" in log
    assert "AWS_SECRET_ACCESS_KEY" not in log
    everything = "".join(p.read_text(errors="replace") for p in day.rglob("*") if p.is_file()
                         and p.suffix in (".log", ".json", ".env", ".html"))
    assert SECRET_KEY not in everything
    recipe_env = (day / "work").glob("*/recipe.env")
    for f in recipe_env:
        text = f.read_text()
        assert "AWS_SECRET_ACCESS_KEY" not in text
        assert "AWS_ACCESS_KEY_ID" not in text


def test_a_full_cache_never_fails_a_build(tmp_path: Path, run_cli: RunCli) -> None:
    """A cap far below one object: sccache evicts and writes what it can; every compile
    still happens and the build succeeds."""
    src = tmp_path / "src"
    write_sources(src)
    recipes = tmp_path / "recipes"
    (recipes / "manywheel").mkdir(parents=True)
    (recipes / "manywheel" / "build.sh").write_text(COMPILE_RECIPE)
    config = tmp_path / "nightly.toml"
    config.write_text(config_text(src, recipes=recipes, matrix="""
[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]
""", extra=f"""
[smoke]
enabled = false

[cache]
dir = "{tmp_path / 'tiny'}"
size = "1"
"""))
    for date in ("2024_05_01", "2024_05_02"):
        e = cache_entries(night(run_cli, config, date))["manywheel_3.11_cpu"]
        assert e["status"] == "succeeded"
        assert e["cache"]["requests"] == 4
        assert e["cache"]["hits"] + e["cache"]["misses"] == 4
        assert e["cache"]["hits"] < 4  # nothing fits: no night is fully served by the cache


def test_enabled_false_builds_without_sccache(tmp_path: Path, run_cli: RunCli) -> None:
    src = tmp_path / "src"
    write_sources(src)
    recipes = tmp_path / "recipes"
    (recipes / "manywheel").mkdir(parents=True)
    (recipes / "manywheel" / "build.sh").write_text(COMPILE_RECIPE)
    config = tmp_path / "nightly.toml"
    config.write_text(config_text(src, recipes=recipes, matrix="""
[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]
""", extra="[smoke]\nenabled = false\n\n[cache]\nenabled = false\n"))
    day = night(run_cli, config, "2024_05_01")
    e = cache_entries(day)["manywheel_3.11_cpu"]
    assert e.get("cache") is None
    log = (day / e["log"]).read_text()
    assert "SCCACHE" not in log
    assert "compiler cache" not in log
    assert "/cache/run" not in log


# ---------------------------------------------------------------------------- containers


def test_container_builds_use_a_cache_per_image(
    tmp_path: Path, run_cli: RunCli, engine: Engine
) -> None:
    src = tmp_path / "src"
    write_sources(src)
    recipes = tmp_path / "recipes"
    (recipes / "manywheel").mkdir(parents=True)
    (recipes / "manywheel" / "build.sh").write_text(COMPILE_RECIPE)
    cache_dir = tmp_path / "sccache"
    config = tmp_path / "nightly.toml"
    config.write_text(config_text(src, recipes=recipes, executor="container", matrix="""
[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]
""", extra=f"""
[images]
default = "{engine.image}"

[executor.container]
base_url = "{engine.base_url}"

[smoke]
enabled = false

[cache]
dir = "{cache_dir}"
"""))
    key = "".join(c if c.isalnum() or c in "_.-" else "_" for c in f"{engine.image}-cpu")
    day1 = night(run_cli, config, "2024_05_01")
    first = cache_entries(day1)["manywheel_3.11_cpu"]["cache"]
    assert (first["hits"], first["misses"], first["requests"]) == (0, 4, 4), first
    assert store_of(f"local disk {cache_dir}", key).fullmatch(first["where"]), first
    day2 = night(run_cli, config, "2024_05_02")
    e = cache_entries(day2)["manywheel_3.11_cpu"]
    assert (e["cache"]["hits"], e["cache"]["misses"]) == (4, 0), e["cache"]
    log = (day2 / e["log"]).read_text()
    assert "[nightly] compiler cache: sccache" in log
    assert "SCCACHE_DIR=/nightly/sccache-dir" in log
    # Only this toolchain's folder exists: a host build would get its own.
    (project,) = list(cache_dir.iterdir())  # one project's store, one toolchain in it
    assert re.fullmatch(_NS, project.name), project
    assert [p.name for p in project.iterdir()] == [key]


# ---------------------------------------------------------------------------- S3 (moto)


@pytest.fixture
def moto_s3() -> Iterator[tuple[str, str]]:
    """moto's S3 server on loopback, a bucket, and credentials in this process's environment
    (which the nightly subprocess inherits). Yields (endpoint, bucket)."""
    with moto_server(ACCESS_KEY, SECRET_KEY) as m:
        yield m.endpoint, m.new_bucket("cache-")


def s3_keys(endpoint: str, bucket: str) -> list[str]:
    import boto3

    listing = boto3.client("s3", endpoint_url=endpoint).list_objects_v2(Bucket=bucket)
    return [o["Key"] for o in listing.get("Contents", [])]


def test_s3_cache_on_moto_is_shared_between_nights(
    tmp_path: Path, run_cli: RunCli, moto_s3: tuple[str, str]
) -> None:
    endpoint, bucket = moto_s3
    src = tmp_path / "src"
    write_sources(src)
    recipes = tmp_path / "recipes"
    (recipes / "manywheel").mkdir(parents=True)
    (recipes / "manywheel" / "build.sh").write_text(COMPILE_RECIPE)
    config = tmp_path / "nightly.toml"
    # The endpoint comes from [publish], as the issue asks: one set of endpoint settings.
    config.write_text(config_text(src, recipes=recipes, matrix="""
[matrix.linux.manywheel]
pythons = ["3.11", "3.12"]
cudas = ["cpu"]
""", extra=f"""
[smoke]
enabled = false

[publish]
url = "s3://{bucket}/pub"
endpoint_url = "{endpoint}"
index = false

[cache]
url = "s3://{bucket}/sccache"
"""))
    day = night(run_cli, config, "2024_05_01")
    entries = cache_entries(day)
    # Same sources, same toolchain, two Pythons: the second build is served by the first.
    stats = sorted((e["cache"]["hits"], e["cache"]["misses"]) for e in entries.values())
    assert stats == [(0, 4), (4, 0)], entries
    wheres = {e["cache"]["where"] for e in entries.values()}
    assert len(wheres) == 1, wheres
    assert store_of(f"s3://{bucket}/sccache", "host-cpu").fullmatch(*wheres), wheres
    assert any(re.match(f"sccache/{_NS}/host-cpu/", k) for k in s3_keys(endpoint, bucket))
    log_text = "".join(p.read_text() for p in (day / "logs").rglob("*.log"))
    assert SECRET_KEY not in log_text


# ---------------------------------------------------------------------------- cluster + S3


@pytest.fixture
def s3_cluster(moto_s3: tuple[str, str], tmp_path: Path) -> Iterator[str]:
    """A Dask scheduler and two one-slot linux workers on loopback, started with the S3
    credentials in their environment (a build host's own credentials: they never travel)."""
    import time

    from distributed import Client

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = str(REPO / ".venv" / "bin" / "dask")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    if ROOT_OPT_IN:
        # Who builds on a worker host is the host's to say (nightly.cluster.hostconfig): as
        # root with the cache's credentials, these hosts run recipes as root knowingly.
        host_file = tmp_path / "worker-host.toml"
        host_file.write_text(f'[executor.local]\nuser = "{ROOT_OPT_IN}"\n')
        env["NIGHTLY_WORKER_CONFIG"] = str(host_file)
    procs = []
    logs = []

    def spawn(name: str, args: list[str]) -> None:
        log = (tmp_path / f"{name}.log").open("ab")
        logs.append(log)
        procs.append(subprocess.Popen([dask, *args], stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=env))

    spawn("scheduler", ["scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"])
    for name in ("w1", "w2"):
        (tmp_path / name).mkdir()
        spawn(name, ["worker", address, "--name", name, "--nthreads", "1", "--resources",
                     "slots=1,platform-linux=1", "--local-directory", str(tmp_path / name),
                     "--no-nanny", "--host", "127.0.0.1", "--no-dashboard"])
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(address, timeout=10, set_as_default=False) as c:  # type: ignore[no-untyped-call]
                    if len(c.scheduler_info(n_workers=-1)["workers"]) == 2:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the Dask workers did not join"
            time.sleep(0.3)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in logs:
            log.close()


def test_cluster_builds_share_an_s3_cache_on_moto(
    tmp_path: Path, run_cli: RunCli, moto_s3: tuple[str, str], s3_cluster: str
) -> None:
    endpoint, bucket = moto_s3
    src = tmp_path / "src"
    write_sources(src)
    recipes = tmp_path / "recipes"
    (recipes / "manywheel").mkdir(parents=True)
    (recipes / "manywheel" / "build.sh").write_text(COMPILE_RECIPE)
    config = tmp_path / "nightly.toml"
    config.write_text(config_text(src, recipes=recipes, matrix="""
[matrix.linux.manywheel]
pythons = ["3.11", "3.12"]
cudas = ["cpu"]
""", extra=f"""
[smoke]
enabled = false

[cluster]
address = "{s3_cluster}"
staging = "staging"
log_flush = 0.2
connect_timeout = "20s"

[cache]
url = "s3://{bucket}/sccache"
endpoint_url = "{endpoint}"
"""))
    night(run_cli, config, "2024_05_01")
    day = night(run_cli, config, "2024_05_02")
    entries = cache_entries(day)
    workers = set()
    for bid in ("manywheel_3.11_cpu", "manywheel_3.12_cpu"):
        e = entries[bid]
        assert e["status"] == "succeeded", e
        workers.add(e["worker_name"])
        # The next night, whichever worker builds it, every object comes from the shared store.
        assert (e["cache"]["hits"], e["cache"]["misses"]) == (4, 0), e["cache"]
        assert store_of(f"s3://{bucket}/sccache", "host-cpu").fullmatch(e["cache"]["where"]), e
        log = (day / e["log"]).read_text()
        assert "[nightly] cluster attempt " in log
        assert "compiler cache: 4 hits, 0 misses" in log
        assert SECRET_KEY not in log
    assert workers <= {"w1", "w2"}
    assert any(re.match(f"sccache/{_NS}/host-cpu/", k) for k in s3_keys(endpoint, bucket))


def test_a_killed_build_takes_its_cache_server_along(tmp_path: Path, run_cli: RunCli) -> None:
    """The server is the build's own child (not a daemon): a timeout kills it with the build."""
    src = tmp_path / "src"
    write_sources(src, n=1)
    recipes = tmp_path / "recipes"
    (recipes / "manywheel").mkdir(parents=True)
    (recipes / "manywheel" / "build.sh").write_text(
        '#!/usr/bin/env bash\nset -e\ncd "$WORK_DIR"\n${CC:-cc} -c "$SOURCE_DIR/f0.c" -o f0.o\n'
        'echo compiled\nsleep 120\n')
    cache_dir = tmp_path / "sccache"
    config = tmp_path / "nightly.toml"
    config.write_text(config_text(src, recipes=recipes, matrix="""
[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]
""", extra=f"""
[timeouts]
default = "6s"

[retries]
infra = 0

[smoke]
enabled = false

[cache]
dir = "{cache_dir}"
"""))
    code, out, err = run_cli(["run", "--config", str(config), "--date", "2024_05_01"],
                             cwd=tmp_path, timeout=120)
    assert code == 1, out + err
    e = cache_entries(tmp_path / "nightlies" / "2024_05_01")["manywheel_3.11_cpu"]
    assert "timeout" in (e["reason"] or ""), e
    assert "compiled" in (tmp_path / "nightlies" / "2024_05_01" / e["log"]).read_text()

    def servers() -> list[int]:
        found = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and str(cache_dir).encode() in (proc / "environ").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
        return found

    deadline = time.monotonic() + 10
    while servers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert servers() == []
