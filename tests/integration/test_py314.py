"""Python 3.14 for real: the demo's cp314 manywheels (cpu and CUDA 13.0) built in the builder
image of configs/demo-py314.toml (Debian sid's binary python3.14, nightly's glibc 2.31
sysroot toolchain, nvcc with sid's gcc-14), manylinux_2_28 or better by auditwheel, published
to a folder mirror, then installed from the mirror's index pages and used in the builder's
runtime image (sid minbase + the same interpreter; no compiler, no toolkit).

Cold this builds the sid base (a debootstrap with gcc, g++-14 and python3-dev), the cpu and
cu130 layers and the sid runtime base: see docs/images.md for the figures. Warm (images
present) it is one small night. The steps: tests/support/pydemo.py (test_py315 shares them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.engine import Engine
from tests.support.pydemo import build_publish_and_use

# Cold, the images alone took 963 s on a loaded 2-CPU machine (docs/images.md): more than
# the suite's 900 s default.
pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(3600)]


def test_the_demos_cp314_wheels_are_built_published_and_used_in_the_runtime_image(
    engine: Engine, tmp_path: Path
) -> None:
    build_publish_and_use(engine, tmp_path, "3.14")
