"""One configuration for the manylinux policy and toolchain unit tests: a manywheel matrix
(cpu, CUDA 11.8) and a conda one, built in a declared builder `demo`, with a slot for what
the matrix and the builder declare."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nightly.config import load

CONFIG = """\
[project]
name = "demo"
source = "."
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu", "11.8"]
{matrix}

[matrix.linux.conda]
pythons = ["3.11"]
cudas = ["cpu"]

[images]
default = "@demo"

[builders.demo]
compilers = ["gcc", "g++", "gcc-11", "g++-11"]
cudas = ["cpu", "11.8"]
pythons = {{ "3.11" = "distro" }}
{builder}

[[machines]]
name = "a"
platform = "linux"
queues = 1
executor = "container"
"""


def text(matrix: str = "", builder: str = "") -> str:
    """The configuration with `matrix` added to [matrix.linux.manywheel] and `builder` to
    [builders.demo]."""
    return CONFIG.format(matrix=matrix, builder=builder)


def load_config(tmp_path: Path, matrix: str = "", builder: str = "") -> Any:
    p = tmp_path / "nightly.toml"
    p.write_text(text(matrix, builder))
    return load(p)
