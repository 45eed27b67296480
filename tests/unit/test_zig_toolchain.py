"""zig as the second glibc-targeting toolchain (`toolchain = "zig"`): where it is chosen
(builder, matrix), what an image and a host build get for it, and that CUDA builds keep the
sysroot toolchain (nvcc rejects zig's libc++)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

from nightly.builds.run.jobs import manylinux_env
from nightly.core.spec import ZIG_REVISION, ZIG_VERSION
from nightly.core.specparse import parse_spec
from nightly.errors import ConfigError
from nightly.images import context, sysroot, zig
from tests.support.policy_config import load_config


def _config(tmp_path: Path, matrix: str = "", builder: str = "") -> Any:
    return load_config(tmp_path, 'manylinux = "2_28"\n' + matrix, builder)


def _spec(**extra: Any) -> Any:
    table = {"compilers": ["gcc-11", "g++-11"], "cudas": ["cpu", "11.8"], "manylinux": "2_28"}
    return parse_spec("demo", {**table, **extra})


def test_a_zig_builder_targets_glibc_2_17_and_its_cuda_images_the_sysroot() -> None:
    plain, chosen = _spec(), _spec(toolchain="zig")
    assert (plain.toolchain, chosen.toolchain) == ("sysroot", "zig")
    assert chosen.toolchain_for("cpu") == "zig"
    assert chosen.toolchain_for("cu118") == "sysroot"
    assert chosen.manylinux_tag("cpu") == "manylinux_2_17_x86_64"
    assert chosen.manylinux_tag("cu118") == "manylinux_2_31_x86_64"
    assert f"zig {ZIG_VERSION} cc -target x86_64-linux-gnu.2.17" in chosen.toolchain_text("cpu")
    assert "nvcc's host compiler" in chosen.toolchain_text("cu118")
    # An older policy is targeted as it is; one newer than the base's glibc needs nothing.
    assert _spec(toolchain="zig", manylinux="2_12").manylinux_tag() == "manylinux_2_12_x86_64"
    assert _spec(toolchain="zig", manylinux="2_36").toolchain == "system"
    # The choice is part of what the image holds: another tag from the cpu layer up.
    assert plain.base_hash() == chosen.base_hash()
    assert plain.tag_for("cpu") != chosen.tag_for("cpu")
    assert plain.tag_for("cu118") != chosen.tag_for("cu118")
    # Declaring the default explicitly changes nothing.
    assert _spec(toolchain="sysroot").tag_for("cpu") == plain.tag_for("cpu")


def test_the_zig_images_dockerfiles() -> None:
    spec = _spec(toolchain="zig")
    text = context.cpu_dockerfile(spec, {})
    # Both toolchains: zig for C/C++, the sysroot for the CUDA images built on this one.
    assert f"COPY toolchain {sysroot.IMAGE_PATH}" in text
    assert f"COPY zig {zig.IMAGE_PATH}" in text
    assert f'CC="{zig.IMAGE_PATH}/bin/cc"' in text
    assert f'LDCXXSHARED="{zig.IMAGE_PATH}/bin/c++ -pthread -shared"' in text
    assert 'NIGHTLY_ZIG_GLIBC="2.17"' in text
    assert f'ZIG_GLOBAL_CACHE_DIR="{zig.IMAGE_PATH}/cache"' in text
    # zig's ENV comes after the sysroot's, so it is what builds see.
    assert text.index(f'CC="{zig.IMAGE_PATH}/bin/cc"') > text.index(f'CC="{sysroot.IMAGE_PATH}')
    assert f"chmod -R a+rwX {zig.IMAGE_PATH}/cache" in text
    cuda = context.cuda_toolchain_env(spec, "cu118")
    assert cuda["CC"] == f"{sysroot.IMAGE_PATH}/bin/gcc"
    assert cuda["LDSHARED"].startswith(f"{sysroot.IMAGE_PATH}/bin/gcc ")
    assert cuda["NVCC_CCBIN"].endswith("/gcc11/g++")
    # A sysroot builder's CUDA layers only name nvcc's host compiler.
    assert set(context.cuda_toolchain_env(_spec(), "cu118")) == {"CUDAHOSTCXX", "NVCC_CCBIN"}
    assert "COPY zig" not in context.cpu_dockerfile(_spec(), {})


def test_the_matrix_chooses_for_builders_that_do_not_and_for_host_builds(tmp_path: Path) -> None:
    c = _config(tmp_path, matrix='toolchain = "zig"')
    assert c.builders["demo"].toolchain == "zig"
    c = _config(tmp_path, matrix='toolchain = "zig"', builder='toolchain = "sysroot"')
    assert c.builders["demo"].toolchain == "sysroot"
    cpu = next(b for b in c.builds if b.id == "manywheel_3.11_cpu")
    cuda = next(b for b in c.builds if b.id == "manywheel_3.11_cu118")
    local = manylinux_env(c, cpu, "local")
    if sysroot.host_glibc() > (2, 28):
        assert local["CC"].endswith(f"/toolchains/zig-{ZIG_VERSION}-{ZIG_REVISION}/bin/cc")
        assert local["NIGHTLY_ZIG_GLIBC"] == "2.17"
        assert zig.ENV_CACHE in local
        assert sysroot.ENV_CACHE not in local
        # CUDA builds on the host: the sysroot, whatever the choice.
        on_host = manylinux_env(c, cuda, "local")
        assert on_host["CC"].endswith("/bin/gcc")
        assert zig.ENV_CACHE not in on_host
    assert "CC" not in manylinux_env(c, cpu, "container")  # the image has its own


@pytest.mark.parametrize(
    ("matrix", "builder", "key"),
    [('toolchain = "clang"', "", "matrix.linux.manywheel.toolchain"),
     ("", 'toolchain = "musl"', "builders.demo.toolchain")],
)
def test_an_unknown_toolchain_names_its_key(tmp_path: Path, matrix: str, builder: str,
                                            key: str) -> None:
    with pytest.raises(ConfigError) as e:
        _config(tmp_path, matrix, builder)
    assert e.value.key == key
    assert "sysroot" in str(e.value.hint)


def test_the_wheel_is_unpacked_without_other_targets(tmp_path: Path) -> None:
    wheel = tmp_path / f"ziglang-{ZIG_VERSION}-py3-none-manylinux_2_12_x86_64.whl"
    keep = ["ziglang/zig", "ziglang/lib/std/std.zig", "ziglang/lib/libcxx/include/vector",
            "ziglang/lib/libc/glibc/abilists",
            "ziglang/lib/libc/include/x86-linux-gnu/bits/a.h",
            "ziglang/lib/libc/include/generic-glibc/stdio.h"]
    drop = ["ziglang/__init__.py", "ziglang/lib/libc/include/aarch64-linux-gnu/bits/a.h",
            "ziglang/lib/libc/musl/src/x.c", "ziglang/lib/libc/mingw/x.def",
            f"ziglang-{ZIG_VERSION}.dist-info/RECORD"]
    with zipfile.ZipFile(wheel, "w") as zf:
        for name in keep + drop:
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o755 if name.endswith("/zig") else 0o644) << 16
            zf.writestr(info, "x")
    zig.unpack(wheel, tmp_path / "out")
    got = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*")
                 if p.is_file())
    assert got == sorted("zig/" + n.split("/", 1)[1] for n in keep)
    assert (tmp_path / "out" / "zig" / "zig").stat().st_mode & 0o111


def test_the_wrappers_target_the_glibc_they_are_given(tmp_path: Path) -> None:
    zig.write_wrappers(tmp_path)
    cc = (tmp_path / "bin" / "cc").read_text()
    assert 'exec "$here/../zig/zig" cc -target "x86_64-linux-gnu.${NIGHTLY_ZIG_GLIBC:-2.17}"' in cc
    assert 'ZIG_GLOBAL_CACHE_DIR="$here/../cache"' in cc
    # gcc's defaults: no UBSan unless asked for; links without -O get -O2 (zig builds its
    # compiler-rt and libc++ at link time, in the link's mode).
    assert '[ "$san" = 1 ] || set -- -fno-sanitize=undefined "$@"' in cc
    assert '[ "$opt" = 1 ] || [ "$link" = 0 ] || set -- -O2 "$@"' in cc
    assert " c++ -target " in (tmp_path / "bin" / "c++").read_text()
    assert (tmp_path / "bin" / "g++").resolve() == (tmp_path / "bin" / "c++").resolve()
    env = zig.host_env((2, 12), tmp_path)
    assert env["NIGHTLY_ZIG_GLIBC"] == "2.12"
    assert env["LDSHARED"] == env["CC"] + " -pthread -shared"
