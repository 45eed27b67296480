"""Shared helpers for the benchmark scripts: timing, medians, a plain table, and results
written to benchmarks/results/<name>.json with what machine they were measured on.

A benchmark script is run directly (`.venv/bin/python benchmarks/bench_x.py`); this module
sits beside it and is imported as `common` (the script puts its own folder on sys.path).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import platform
import statistics
import sys
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

# NIGHTLY_BENCH_RESULTS: another folder for the JSON (the test suite's runs write there, so
# that a test never overwrites the figures of a real run).
RESULTS_DIR = Path(os.environ.get("NIGHTLY_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")
SKIPPED = 77  # a benchmark's exit status when something it needs is absent (it says what, in one line)
T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """(fn's result, wall seconds it took)."""
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def compile_nightly() -> None:
    """nightly's modules byte-compiled, as installing it does. A benchmark that starts
    `nightly` again and again measures it as installed, not an environment that sets
    PYTHONDONTWRITEBYTECODE (these machines': every start would compile ~180 modules, 0.3 s)."""
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "nightly"), quiet=1)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def repeat(fn: Callable[[], float], times: int) -> list[float]:
    """Run a measurement `times` times; each call returns its own figure."""
    return [fn() for _ in range(times)]


def machine_info() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "when": dt.datetime.now().isoformat(timespec="seconds"),
    }


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain aligned table (numbers right-aligned), for a terminal or a README."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    numeric = [all(_is_number(row[i]) for row in rows) if rows else False
               for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    out = [line(list(headers)), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]], title: str = "") -> None:
    if title:
        print(f"\n{title}")
    print(format_table(headers, rows))
    sys.stdout.flush()


def write_results(name: str, data: dict[str, Any]) -> Path:
    """benchmarks/results/<name>.json, with the machine it ran on."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    payload = {"benchmark": name, "machine": machine_info(), **data}
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _cell(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def stand_in_wheel(path: Path, dist: str, version: str = "1.0") -> Path:
    """A small valid wheel of `dist` (METADATA naming it, WHEEL, RECORD) at `path`: what a
    stand-in recipe copies into OUTPUT_DIR under its build's own file name, so that the
    night files it as the project's package, as it files a real recipe's."""
    key = dist.replace("-", "_")
    di = f"{key}-{version}.dist-info"
    files = {
        f"{key}/__init__.py": b"",
        f"{di}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
        f"{di}/WHEEL": b"Wheel-Version: 1.0\nGenerator: nightly-benchmarks\nRoot-Is-Purelib: true\n"
                       b"Tag: py3-none-any\n",
    }
    record = "".join(
        f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},"
        f"{len(d)}\n" for n, d in files.items()) + f"{di}/RECORD,,\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr(f"{di}/RECORD", record)
    return path


# The shell lines of a stand-in recipe that deliver the project's wheel (from `@WHEELS@/
# $PROJECT_NAME.whl`, made by stand_in_wheel) under a file name of the build's own: the
# package type, Python, variant and CUDA as the local version, a manylinux platform tag of the
# build's architecture (one every policy accepts).
DELIVER_WHEEL = r"""tag=$(printf '%s.%s.%s.%s' "${PACKAGE_TYPE:-noop}" "${DESIRED_PYTHON:-0}" \
  "${LIBTORCH_VARIANT:-none}" "${DESIRED_CUDA:-cpu}" | tr -cs 'a-zA-Z0-9.' _)
cp "@WHEELS@/$PROJECT_NAME.whl" \
  "$OUTPUT_DIR/${PROJECT_NAME}-1.0+${tag}-py3-none-manylinux_2_17_${NIGHTLY_ARCH:-x86_64}.whl"
"""
