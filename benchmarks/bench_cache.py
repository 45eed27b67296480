"""The compiler cache (issue 18) on a generated C++/CUDA project, through `nightly run`.

    .venv/bin/python benchmarks/bench_cache.py [--cpp 16] [--cuda 6] [--templates 8]
                                               [--quick | --smoke]

The project (generated into a scratch folder) is built like PyTorch: setup.py drives CMake,
which compiles a Python-independent core (C++ files and CUDA kernels, nvcc 13.0) into a
static library that a small Python extension links; the libtorch recipe packages the same
CMake project as a C++ zip. Every night is a real `nightly run` (real recipes, smoke tests)
on this machine with the local executor, one queue (so that builds do not compete for the
machine's cores and a night's time is the sum of its builds), nightly byte-compiled first as
an install is (common.compile_nightly).

Measured in one run, each against its own baseline:

  1. night A cold (empty cache: manywheel 3.12 cu130 + libtorch cu130), then night A again
     the next day after a commit that changes one core source file:  warm / cold  (goal <= 0.3)
  2. one night of four Python versions (manywheel 3.10-3.13 cu130) sharing the core, with a
     cold cache / with [cache] enabled = false:  cache / no cache  (goal <= 0.5)
  3. the hit rate of every build and of each night (from state.json, as the report shows it)

--quick (a minute or two on 2 cores, on any machine: no nvcc needed, nothing warm assumed):
the same measures on a CPU-only core of 3 C++ files (3 instantiations each): night A is
manywheel 3.12 cpu alone, the shared-core night two Pythons (3.12, 3.13) instead of four.
Night A's two nights, a few seconds each there, are run three times (--repeat), each pair in
fresh folders with an empty cache, and the medians compared: one pair alone moved by a
tenth either way from one run to the next on these shared machines.

--smoke (does it still run: the test suite's size; no figure to read): --quick's project with
one Python, so the "shared-core" night is night A's own matrix and its cold cache night is
night A's cold night, reused: 3 builds in 3 nights instead of 6 in 4.

Results: benchmarks/results/cache.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from common import SKIPPED, compile_nightly, format_table, machine_info, write_results  # noqa: E402

CUDA_HOME = Path("/usr/local/cuda-13.0")
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]


# ---------------------------------------------------------------------------- the project


def generate(src: Path, *, cpp: int, cuda: int, templates: int) -> None:
    """A project whose compile time dominates its build: `cpp` heavy C++ files and `cuda`
    kernel files in cpp/, and a one-file extension."""
    (src / "cpp" / "src").mkdir(parents=True)
    (src / "cpp" / "cuda").mkdir()
    (src / "cpp" / "include").mkdir()
    (src / "cachebench").mkdir()
    ns = ",".join(str(n) for n in range(1, templates + 1))
    for i in range(cpp):
        (src / "cpp" / "src" / f"core_{i}.cpp").write_text(CPP_TU.format(i=i, ns=ns))
    kernels = ",".join(str(n) for n in range(1, 4 * templates + 1))
    for j in range(cuda):
        (src / "cpp" / "cuda" / f"kern_{j}.cu").write_text(CU_TU.format(j=j, ns=kernels))
    calls = "\n".join(f"double core_{i}(int n);" for i in range(cpp))
    total = " + ".join(f"core_{i}(n)" for i in range(cpp))
    (src / "cpp" / "src" / "core_api.cpp").write_text(
        f'{calls}\nextern "C" double core_total(int n) {{ return {total}; }}\n'
        f'extern "C" int core_answer(void) {{ return ANSWER; }}\n'.replace("ANSWER", "42"))
    (src / "cpp" / "include" / "core.h").write_text(
        '#pragma once\nextern "C" double core_total(int n);\nextern "C" int core_answer(void);\n')
    (src / "cpp" / "CMakeLists.txt").write_text(CMAKE)
    (src / "setup.py").write_text(SETUP)
    (src / "ext.c").write_text(EXT)
    (src / "cachebench" / "__init__.py").write_text(
        "from cachebench._ext import answer, total\n__all__ = ['answer', 'total']\n")


CPP_TU = """#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>
namespace core{i} {{
template <int N> struct Item {{ double v[N % 5 + 1]; std::string name; }};
template <int N> double work(int n) {{
  std::vector<Item<N>> items(n);
  std::map<std::string, double> index;
  std::unordered_map<int, std::vector<double>> buckets;
  for (int i = 0; i < n; ++i) {{ items[i].v[0] = i * 1.5 + N + {i}; items[i].name = std::to_string(i * N); }}
  std::sort(items.begin(), items.end(),
            [](const Item<N>& a, const Item<N>& b) {{ return a.name < b.name; }});
  for (auto& it : items) {{ index[it.name] += it.v[0]; buckets[int(it.v[0]) % 7].push_back(it.v[0]); }}
  std::function<double(double)> f = [&](double x) {{ return x * N + index.size(); }};
  std::ostringstream os;
  os << index.size();
  double s = std::accumulate(items.begin(), items.end(), 0.0,
                             [&](double acc, const Item<N>& it) {{ return acc + f(it.v[0]); }});
  return s + buckets.size() + os.str().size();
}}
template <int... Ns> double all(int n) {{ return (work<Ns>(n) + ...); }}
}}  // namespace core{i}
double core_{i}(int n) {{ return core{i}::all<{ns}>(n); }}
"""

CU_TU = """#include <cuda_runtime.h>
namespace kern{j} {{
template <int N> __global__ void kern(const float* a, float* b, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {{ float x = a[i]; for (int k = 0; k < N + {j}; ++k) x = x * 1.0001f + k; b[i] = x; }}
}}
template <int N> void launch(const float* a, float* b, int n) {{
  kern<N><<<(n + 255) / 256, 256>>>(a, b, n);
}}
template <int... Ns> void all(const float* a, float* b, int n) {{ (launch<Ns>(a, b, n), ...); }}
}}  // namespace kern{j}
void kern_{j}(const float* a, float* b, int n) {{ kern{j}::all<{ns}>(a, b, n); }}
"""

CMAKE = """cmake_minimum_required(VERSION 3.18)
project(core LANGUAGES CXX)
option(USE_CUDA "compile the CUDA kernels" OFF)
option(BUILD_SHARED_LIBS "a shared library" OFF)
set(CMAKE_CXX_STANDARD 17)
file(GLOB SRCS src/*.cpp)
if(USE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 75)
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  file(GLOB CU cuda/*.cu)
  list(APPEND SRCS ${CU})
endif()
add_library(core ${SRCS})
set_target_properties(core PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(core PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>)
if(USE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  target_link_libraries(core PRIVATE CUDA::cudart_static)
endif()
install(TARGETS core)
install(DIRECTORY include/ DESTINATION include)
"""

# setup.py: the core through CMake (its own flags, the same for every Python: PyTorch's
# shape), in a build folder that does not depend on the Python version either.
SETUP = '''import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class CMakeCore(build_ext):
    def run(self):
        here = os.path.dirname(os.path.abspath(__file__))
        build = os.path.join(here, "build", "core")
        cuda = os.environ.get("USE_CUDA") == "1"
        args = ["cmake", "-S", os.path.join(here, "cpp"), "-B", build,
                "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
                "-DUSE_CUDA=" + ("ON" if cuda else "OFF")]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        if cuda:
            args.append("-DCMAKE_CUDA_COMPILER=" + os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc"))
        subprocess.check_call(args)
        subprocess.check_call(["cmake", "--build", build, "-j", os.environ.get("MAX_JOBS", "2")])
        ext = self.extensions[0]
        ext.extra_objects.append(os.path.join(build, "libcore.a"))
        if cuda:
            ext.library_dirs.append(os.path.join(os.environ["CUDA_HOME"], "lib64"))
            ext.libraries.extend(["cudart_static", "dl", "pthread", "rt"])
        ext.language = "c++"
        build_ext.run(self)


setup(
    name="cachebench",
    version=os.environ.get("BUILD_VERSION", "0.1.0.dev0"),
    packages=["cachebench"],
    ext_modules=[Extension("cachebench._ext", sources=["ext.c"])],
    cmdclass={"build_ext": CMakeCore},
)
'''

EXT = """#define PY_SSIZE_T_CLEAN
#include <Python.h>
double core_total(int n);
int core_answer(void);
static PyObject *answer(PyObject *s, PyObject *a) { return PyLong_FromLong(core_answer()); }
static PyObject *total(PyObject *s, PyObject *a) { return PyFloat_FromDouble(core_total(50)); }
static PyMethodDef M[] = {{"answer", answer, METH_NOARGS, ""}, {"total", total, METH_NOARGS, ""},
                          {NULL, NULL, 0, NULL}};
static struct PyModuleDef D = {PyModuleDef_HEAD_INIT, "_ext", NULL, -1, M};
PyMODINIT_FUNC PyInit__ext(void) { return PyModule_Create(&D); }
"""


# ---------------------------------------------------------------------------- nights


def config(folder: Path, src: Path, *, matrix: str, answer: int, cache: str) -> Path:
    path = folder / "nightly.toml"
    # CUDA 13.0 for the full run's builds (a --quick run builds cpu only: any machine).
    cuda_section = (f'[executor.local.cuda]\n"cu130" = "{CUDA_HOME}"'
                    if (CUDA_HOME / "bin" / "nvcc").exists() else "")
    path.write_text(f"""
root = "nightlies"
recipes = "{REPO / 'recipes'}"

[project]
name = "cachebench"
source = "{src}"
base_version = "0.1.0"

{matrix}

[[machines]]
name = "bench"
platform = "linux"
queues = 1
executor = "local"

{cuda_section}

[timeouts]
default = "2h"

[smoke]
command = '"$PYTHON" -c "import cachebench; assert cachebench.answer() == {answer}; cachebench.total()"'

[cache]
{cache}
""")
    return path


def night(cfg: Path, date: str) -> dict[str, Any]:
    nightly = Path(sys.executable).parent / "nightly"
    started = time.monotonic()
    proc = subprocess.run([str(nightly), "run", "--config", str(cfg), "--date", date, "--no-upload"],
                          cwd=cfg.parent, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    day = cfg.parent / "nightlies" / date
    if proc.returncode != 0:
        logs = "".join(p.read_text(errors="replace")[-4000:] for p in (day / "logs").rglob("*.log"))
        raise SystemExit(f"night {date} of {cfg} failed ({proc.returncode}):\n{proc.stdout[-3000:]}"
                         f"\n{proc.stderr[-3000:]}\n{logs}")
    builds = json.loads((day / "state.json").read_text())["builds"]
    per_build = {bid: {"duration_s": e.get("duration_s"), "cache": e.get("cache")}
                 for bid, e in sorted(builds.items())}
    hits = sum((b["cache"] or {}).get("hits", 0) for b in per_build.values())
    misses = sum((b["cache"] or {}).get("misses", 0) for b in per_build.values())
    result = {"wall_s": round(took, 1), "builds": per_build, "hits": hits, "misses": misses,
              "hit_rate": round(hits / (hits + misses), 4) if hits + misses else None}
    print(f"  night {date}: {took:.0f} s; hits {hits}, misses {misses}", flush=True)
    for bid, b in per_build.items():
        print(f"    {bid}: {b['duration_s']} s, cache {b['cache']}", flush=True)
    return result


def _median_night(nights: list[dict[str, Any]]) -> dict[str, Any]:
    """The night of median wall time (the lower middle one of an even count)."""
    return sorted(nights, key=lambda n: n["wall_s"])[(len(nights) - 1) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpp", type=int, default=16, help="heavy C++ files in the core")
    ap.add_argument("--cuda", type=int, default=6, help="CUDA kernel files in the core")
    ap.add_argument("--templates", type=int, default=8, help="instantiations per file (cost)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="CPU only, 3 C++ files, night A without libtorch, two Pythons")
    size.add_argument("--smoke", action="store_true",
                      help="--quick with one Python, night A's cold night reused: 3 builds")
    ap.add_argument("--repeat", type=int, default=None,
                    help="night A's pair of nights (cold, next day) this many times, each in "
                    "fresh folders; the medians are compared (default: 3 with --quick, else 1)")
    args = ap.parse_args()
    args.quick = args.quick or args.smoke
    repeat = max(1, args.repeat or (3 if args.quick and not args.smoke else 1))
    if args.quick:
        args.cpp, args.cuda, args.templates = 3, 0, 3
    cuda = "cpu" if args.quick else "13.0"
    pythons = PYTHONS[2:3] if args.smoke else PYTHONS[2:] if args.quick else PYTHONS
    if not args.quick and not (CUDA_HOME / "bin" / "nvcc").exists():
        print(f"skipped: needs CUDA 13.0's nvcc at {CUDA_HOME} (it compiles CUDA kernels)", flush=True)
        return SKIPPED
    compile_nightly()
    scratch = Path(tempfile.mkdtemp(prefix="nightly-bench-cache-"))
    try:
        src = scratch / "src"
        generate(src, cpp=args.cpp, cuda=args.cuda, templates=args.templates)
        night_a = f"""
[matrix.linux.manywheel]
pythons = ["3.12"]
cudas = ["{cuda}"]
"""
        if not args.quick:
            night_a += """
[matrix.linux.libtorch]
variants = ["shared-without-deps"]
python = "3.12"
cudas = ["13.0"]
"""
        four = f"""
[matrix.linux.manywheel]
pythons = {json.dumps(pythons)}
cudas = ["{cuda}"]
"""
        api = src / "cpp" / "src" / "core_api.cpp"
        colds: list[dict[str, Any]] = []
        warms: list[dict[str, Any]] = []
        for i in range(repeat):
            # A fresh root and cache each time; the next day's commit changes one core file
            # (the answer the smoke test checks).
            api.write_text(api.read_text().replace("return 43;", "return 42;"))
            print(f"night A, cold cache ({i + 1} of {repeat})", flush=True)
            a = scratch / f"a{i}"
            a.mkdir()
            cache_a = f'dir = "{scratch / f"cache-a{i}"}"'
            colds.append(night(config(a, src, matrix=night_a, answer=42, cache=cache_a), "2030_01_01"))
            api.write_text(api.read_text().replace("return 42;", "return 43;"))
            print(f"night A, next day, one source file changed ({i + 1} of {repeat})", flush=True)
            warms.append(night(config(a, src, matrix=night_a, answer=43, cache=cache_a), "2030_01_02"))
        cold, warm = _median_night(colds), _median_night(warms)

        print(f"{len(pythons)} Pythons, no cache", flush=True)
        n = scratch / "nocache"
        n.mkdir()
        off = night(config(n, src, matrix=four, answer=43, cache="enabled = false"), "2030_01_03")
        if args.smoke:  # the same matrix as night A's, whose cold night this one would repeat
            print(f"{len(pythons)} Python, cold cache: night A's cold night", flush=True)
            on = cold
        else:
            print(f"{len(pythons)} Pythons, cold cache", flush=True)
            c = scratch / "cache"
            c.mkdir()
            on = night(config(c, src, matrix=four, answer=43, cache=f'dir = "{scratch / "cache-4"}"'),
                       "2030_01_03")
        result = {
            "workload": {"cpp_files": args.cpp + 1, "cuda_files": args.cuda,
                         "templates": args.templates, "cuda": cuda, "pythons": pythons,
                         "libtorch": not args.quick, "quick": args.quick, "smoke": args.smoke},
            "machine": machine_info(),
            "night_a": {"cold": cold, "warm": warm, "repeat": repeat,
                        "cold_walls_s": [c["wall_s"] for c in colds],
                        "warm_walls_s": [w["wall_s"] for w in warms],
                        "warm_over_cold": round(warm["wall_s"] / cold["wall_s"], 3)},
            "four_pythons": {"no_cache": off, "cache": on,
                             "cache_over_no_cache": round(on["wall_s"] / off["wall_s"], 3)},
        }
        rows = [
            ["night A: warm (one file changed) / cold (s)"
             + (f", medians of {repeat}" if repeat > 1 else ""), warm["wall_s"], cold["wall_s"],
             result["night_a"]["warm_over_cold"], "goal <= 0.3"],
            [f"{len(pythons)} Pythons: cache / no cache (s)", on["wall_s"], off["wall_s"],
             result["four_pythons"]["cache_over_no_cache"], "goal <= 0.5"],
            ["hit rate: night A cold / warm", cold["hit_rate"], warm["hit_rate"], "", ""],
            [f"hit rate: {len(pythons)} Pythons with the cache", on["hit_rate"], "", "", ""],
        ]
        print(format_table(["measure", "a", "b", "a/b", "note"], rows))
        write_results("cache", result)
    finally:
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
