"""Shared helpers for the unit tests: a minimal valid config, a config writer, the CLI
run in-process and as a real process, and the table of bad configurations that both
test_config.py (the loader's error fields) and test_cli_plan.py (exit code and message)
go through.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from nightly.cli.main import main
from tests.support.cli import run_process

REPO = Path(__file__).resolve().parents[2]
CONFIG_2019 = REPO / "configs" / "pytorch-2019.toml"
CONFIG_MODERN = REPO / "configs" / "pytorch-modern.toml"

# Line numbers matter: the bad-config table below names lines of this text.
MINIMAL_CONFIG = """\
[project]
name = "demo"
source = "."
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = ["3.6m", "3.7m"]
cudas = ["cpu", "cu100"]

[matrix.linux.conda]
pythons = ["3.7"]
cudas = ["cpu", "10.0"]

[[machines]]
name = "a"
platform = "linux"
queues = 2
"""

# The builds MINIMAL_CONFIG expands to, in configuration order.
MINIMAL_IDS = [
    "manywheel_3.6m_cpu",
    "manywheel_3.6m_cu100",
    "manywheel_3.7m_cpu",
    "manywheel_3.7m_cu100",
    "conda_3.7_cpu",
    "conda_3.7_cu100",
]


def edit(old: str, new: str) -> str:
    """MINIMAL_CONFIG with one exact piece replaced (the piece must be there)."""
    assert MINIMAL_CONFIG.count(old) == 1, old
    return MINIMAL_CONFIG.replace(old, new)


@dataclass(frozen=True)
class BadConfig:
    """A configuration the loader must reject, and what the message must name."""

    name: str
    text: str
    key: str  # the key path, as printed between brackets
    line: int | None  # the line the message points at
    message: str  # part of what was wrong
    hint: str | None = None  # part of the suggestion, where one is close
    no_suggestion: bool = False  # nothing is close: the message must not guess


BAD_CONFIGS = [
    BadConfig(
        "publish-atomic-misspelt",
        MINIMAL_CONFIG + '\n[publish]\natomic = "foldr"\n',
        "publish.atomic",
        20,
        "'foldr' is not one of build, folder, night",
        "did you mean 'folder'?",
    ),
    BadConfig(
        "misspelt-required-key",
        edit("queues = 2", "quues = 2"),
        "machines[0].quues",
        17,
        "unknown key",
        "did you mean 'queues'?",
    ),
    BadConfig(
        "unknown-key-beside-valid-one",
        MINIMAL_CONFIG + "qeues = 3\n",
        "machines[0].qeues",
        18,
        "unknown key",
        "did you mean 'queues'?",
    ),
    BadConfig(
        "misspelt-table",
        edit("[project]", "[projcet]"),
        "projcet",
        1,
        "unknown key",
        "did you mean 'project'?",
    ),
    BadConfig(
        "unknown-top-level-table",
        MINIMAL_CONFIG + "\n[retension]\nlocal_days = 3\n",
        "retension",
        19,
        "unknown key",
        "did you mean 'retention'?",
    ),
    BadConfig(
        "unknown-key-far-from-anything",
        edit('base_version = "1.0.0"', 'base_version = "1.0.0"\nfavourite_colour = "blue"'),
        "project.favourite_colour",
        5,
        "unknown key",
        no_suggestion=True,
    ),
    BadConfig(
        "wrong-type-integer",
        edit("queues = 2", 'queues = "two"'),
        "machines[0].queues",
        17,
        "must be an integer, not str",
    ),
    BadConfig(
        "wrong-type-array",
        edit('pythons = ["3.7"]', 'pythons = "3.7"'),
        "matrix.linux.conda.pythons",
        11,
        "must be an array of strings",
    ),
    BadConfig(
        "wrong-type-table",
        MINIMAL_CONFIG.replace("[project]\n", "", 1).replace(
            'name = "demo"\nsource = "."\nbase_version = "1.0.0"\n', 'project = "demo"\n'
        ),
        "project",
        1,
        "must be a table",
    ),
    BadConfig(
        "unknown-package-type",
        edit("[matrix.linux.manywheel]", "[matrix.linux.manywheels]"),
        "matrix.linux.manywheels",
        6,
        "unknown key",
        "did you mean 'manywheel'?",
    ),
    BadConfig(
        "package-type-on-wrong-platform",
        MINIMAL_CONFIG + '\n[matrix.linux.wheel]\npythons = ["3.7"]\ncudas = ["cpu"]\n',
        "matrix.linux.wheel",
        19,
        "wheel is not a linux package type",
        "manywheel",
    ),
    BadConfig(
        "unknown-platform",
        edit("[matrix.linux.conda]", "[matrix.linus.conda]"),
        "matrix.linus",
        10,
        "unknown key",
        "did you mean 'linux'?",
    ),
    BadConfig(
        "malformed-cuda",
        edit('"cu100"]', '"cu10x"]'),
        "matrix.linux.manywheel.cudas",
        8,
        "'cu10x' is not a CUDA version",
    ),
    BadConfig(
        "malformed-cuda-dotted",
        edit('"10.0"]', '"10.0.1"]'),
        "matrix.linux.conda.cudas",
        12,
        "'10.0.1' is not a CUDA version",
    ),
    BadConfig(
        "malformed-python",
        edit('"3.7m"]', '"3.7x"]'),
        "matrix.linux.manywheel.pythons",
        7,
        "'3.7x' is not a Python version",
    ),
    BadConfig(
        "malformed-python-no-minor",
        edit('pythons = ["3.7"]', 'pythons = ["3"]'),
        "matrix.linux.conda.pythons",
        11,
        "'3' is not a Python version",
    ),
    BadConfig(
        "same-cuda-twice-in-two-spellings",
        edit('cudas = ["cpu", "10.0"]', 'cudas = ["cu100", "10.0"]'),
        "matrix.linux.conda",
        10,
        "'cu100' is listed twice",
    ),
    BadConfig(
        "unknown-libtorch-variant",
        MINIMAL_CONFIG
        + '\n[matrix.linux.libtorch]\nvariants = ["shared-with-dep"]\ncudas = ["cpu"]\n',
        "matrix.linux.libtorch.variants",
        20,
        "'shared-with-dep' is not one of",
        "did you mean 'shared-with-deps'?",
    ),
    BadConfig(
        "empty-after-selectors",
        MINIMAL_CONFIG + '\n[selectors]\ninclude = ["manywheel_*"]\nexclude = ["*_cpu", "*_cu100"]\n',
        "selectors",
        19,
        "the matrix is empty after the selectors",
    ),
    BadConfig(
        "include-selector-matches-nothing",
        MINIMAL_CONFIG + '\n[selectors]\ninclude = ["manywheel_3.8m_*"]\n',
        "selectors.include",
        20,
        "selector 'manywheel_3.8m_*' matches no build of the matrix",
        "near misses: manywheel_3.",
    ),
    BadConfig(
        "exclude-selector-matches-nothing",
        MINIMAL_CONFIG + '\n[selectors]\nexclude = ["conda_3.6_cpu"]\n',
        "selectors.exclude",
        20,
        "selector 'conda_3.6_cpu' matches no build of the matrix",
        "near misses: conda_3.7_cpu",
    ),
    BadConfig(
        "duplicate-machine-names",
        MINIMAL_CONFIG + '\n[[machines]]\nname = "a"\nplatform = "linux"\nqueues = 1\n',
        "machines[1].name",
        20,
        "duplicate machine name 'a'",
        "names must be unique",
    ),
    BadConfig(
        "machine-with-zero-queues",
        edit("queues = 2", "queues = 0"),
        "machines[0].queues",
        17,
        "machine 'a' has 0 queues",
        "at least 1",
    ),
    BadConfig(
        "unknown-platform-value",
        edit('platform = "linux"', 'platform = "linx"'),
        "machines[0].platform",
        16,
        "'linx' is not one of linux, macos",
        "did you mean 'linux'?",
    ),
    BadConfig(
        "unknown-executor",
        MINIMAL_CONFIG + 'executor = "contianer"\n',
        "machines[0].executor",
        18,
        "'contianer' is not one of",
        "did you mean 'container'?",
    ),
    BadConfig(
        "unknown-schedule-mode",
        MINIMAL_CONFIG + '\n[schedule]\nmode = "automatic"\n',
        "schedule.mode",
        20,
        "'automatic' is not one of explicit, auto",
        "did you mean 'auto'?",
    ),
    BadConfig(
        "missing-required-key",
        edit('name = "demo"\n', ""),
        "project.name",
        1,
        "is required",
    ),
    BadConfig(
        "no-machine-for-a-platform",
        MINIMAL_CONFIG + '\n[matrix.macos.wheel]\npythons = ["3.7"]\ncudas = ["cpu"]\n',
        "machines",
        14,
        "the matrix has macos builds but no machine has platform 'macos'",
        'add a [[machines]] entry with platform = "macos"',
    ),
    BadConfig(
        "bad-duration",
        MINIMAL_CONFIG + '\n[timeouts]\nmanywheel = "eighty minutes"\n',
        "timeouts.manywheel",
        20,
        "'eighty minutes' is not a duration",
    ),
    BadConfig(
        "bad-base-version",
        edit('base_version = "1.0.0"', 'base_version = "1.0.0-beta"'),
        "project.base_version",
        4,
        "'1.0.0-beta' is not a base version",
    ),
    # Unknown keys are reported before any semantic check, at every level (issue 14 item 2).
    BadConfig(
        "misspelt-matrix-tables",
        MINIMAL_CONFIG.replace("[matrix.", "[matirx."),
        "matirx",
        6,
        "unknown key",
        "did you mean 'matrix'?",
    ),
    BadConfig(
        "unknown-table-before-a-bad-value-above-it",
        edit('base_version = "1.0.0"', 'base_version = "1.0.0-beta"')
        + "\n[retension]\nlocal_days = 3\n",
        "retension",
        19,
        "unknown key",
        "did you mean 'retention'?",
    ),
    BadConfig(
        "misspelt-sub-table",
        MINIMAL_CONFIG + '\n[estimates.defualt]\ncpu = "1m"\ncuda = "1h"\n',
        "estimates.defualt",
        19,
        "unknown key",
        "did you mean 'default'?",
    ),
    BadConfig(
        "misspelt-package-in-a-platform-table",
        MINIMAL_CONFIG + '\n[timeouts.linux]\nmanywheeel = "1h"\n',
        "timeouts.linux.manywheeel",
        20,
        "unknown key",
        "did you mean 'manywheel'?",
    ),
    BadConfig(
        "misspelt-open-table",
        MINIMAL_CONFIG + '\n[executor.local]\npyhtons = {"3.7" = "/usr/bin/python3.7"}\n',
        "executor.local.pyhtons",
        20,
        "unknown key",
        "did you mean 'pythons'?",
    ),
    BadConfig(
        "misspelt-required-matrix-key",
        edit('pythons = ["3.7"]', 'pyhtons = ["3.7"]'),
        "matrix.linux.conda.pyhtons",
        11,
        "unknown key",
        "did you mean 'pythons'?",
    ),
    BadConfig(
        "python-list-in-a-libtorch-matrix",
        MINIMAL_CONFIG + '\n[matrix.linux.libtorch]\npythons = ["3.7"]\ncudas = ["cpu"]\n',
        "matrix.linux.libtorch.pythons",
        20,
        "unknown key",
        "did you mean 'python'?",
    ),
    BadConfig(
        "misspelt-machine-key-in-the-second-machine",
        MINIMAL_CONFIG + '\n[[machines]]\nname = "b"\nplatfrom = "linux"\nqueues = 1\n',
        "machines[1].platfrom",
        21,
        "unknown key",
        "did you mean 'platform'?",
    ),
    BadConfig(
        "malformed-key-of-an-open-table-before-a-bad-value",
        edit('base_version = "1.0.0"', 'base_version = "1.0.0-beta"')
        + '\n[executor.local.cuda]\n"cu10x" = "/usr/local/cuda-10.0"\n',
        "executor.local.cuda.cu10x",
        20,
        "'cu10x' is not a CUDA version",
    ),
    BadConfig(
        "malformed-cuda-key-of-an-image-table",
        MINIMAL_CONFIG + '\n[images.conda]\n"cu1x" = "builder:conda"\n',
        "images.conda.cu1x",
        20,
        "'cu1x' is not a CUDA version",
    ),
]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "bad_config" in metafunc.fixturenames:
        metafunc.parametrize("bad_config", BAD_CONFIGS, ids=[b.name for b in BAD_CONFIGS])


# Test modules take everything through fixtures (no `import conftest`: several test folders
# may each have one).


@pytest.fixture
def minimal_config_text() -> str:
    return MINIMAL_CONFIG


@pytest.fixture
def minimal_ids() -> list[str]:
    return list(MINIMAL_IDS)


@pytest.fixture
def config_2019() -> Path:
    return CONFIG_2019


@pytest.fixture
def config_modern() -> Path:
    return CONFIG_MODERN


WriteConfig = Callable[..., Path]


@pytest.fixture
def write_config(tmp_path: Path) -> WriteConfig:
    """write_config(text, name="nightly.toml") -> the path of a config file in tmp_path."""

    def write(text: str, name: str = "nightly.toml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def minimal_config(write_config: WriteConfig) -> Path:
    return write_config(MINIMAL_CONFIG)


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


RunCli = Callable[..., CliResult]


@pytest.fixture
def nightly(capsys: pytest.CaptureFixture[str]) -> RunCli:
    """nightly("plan", "--json", ...) -> the exit code and output of the real CLI, in-process."""

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        out, err = capsys.readouterr()
        code = exc.value.code
        assert isinstance(code, int), code
        return CliResult(code, out, err)

    return run


RunProcess = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def nightly_process() -> RunProcess:
    """nightly_process(["plan", ...], env=..., cwd=..., command=...) runs a real process."""
    return run_process
