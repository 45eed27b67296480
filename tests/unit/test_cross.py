"""Cross builds (nightly/images/cross.py) without downloading anything: the environment a
recipe gets for aarch64, the target's sysconfigdata moved into its root, the zig wrappers for
the target, and the errors for what cannot be had here."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightly.images import cross, zig


def test_the_recipe_environment_of_an_aarch64_build(tmp_path: Path) -> None:
    env = cross.host_env("aarch64", "3.13", (2, 28), tmp_path)
    root = tmp_path / "cross" / f"trixie-arm64-py3.13-{cross.REVISION}" / "root"
    assert env["NIGHTLY_ARCH"] == "aarch64"
    assert env["_PYTHON_HOST_PLATFORM"] == "linux-aarch64"
    assert env["_PYTHON_SYSCONFIGDATA_NAME"] == "_sysconfigdata__linux_aarch64-linux-gnu"
    assert env["PYTHONPATH"] == str(root.parent / "sysconfig")
    assert env["CC"] == str(cross.zig_folder(tmp_path, "aarch64") / "bin" / "cc")
    assert env["NIGHTLY_ZIG_GLIBC"] == "2.17"  # the policy is 2_28; zig targets 2.17
    assert env["CPPFLAGS"] == f"-I{root}/usr/include/python3.13 -idirafter {root}/usr/include"
    assert env["NIGHTLY_CROSS_RUN"] == f"qemu-aarch64 -L {root} {root}/usr/bin/python3.13"
    assert not (tmp_path / "cross").exists()  # nothing is made until ensure()


def test_what_cannot_be_cross_built_here_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(cross.CrossError, match="cannot cross-build for riscv64"):
        cross.host_env("riscv64", "3.13", (2, 28), tmp_path)
    with pytest.raises(cross.CrossError, match=r"no Debian suite packages Python 3\.10"):
        cross.host_env("aarch64", "3.10", (2, 28), tmp_path)
    assert [cross.suite_for(p) for p in ("3.11", "3.13", "3.14")] == ["bookworm", "trixie", "sid"]


def test_the_targets_sysconfigdata_points_into_its_root(tmp_path: Path) -> None:
    lib = tmp_path / "root" / "usr" / "lib" / "python3.11"
    lib.mkdir(parents=True)
    (lib / "_sysconfigdata__linux_aarch64-linux-gnu.py").write_text(
        "build_time_vars = {'INCLUDEPY': '/usr/include/python3.11', 'prefix': '/usr', "
        "'LIBDIR': '/usr/lib/aarch64-linux-gnu', 'CFLAGS': '-I/usr/include/x -O2', "
        "'HOST_GNU_TYPE': 'aarch64-unknown-linux-gnu', 'SCRIPTDIR': '/usr/library'}\n")
    cross._sysconfig(tmp_path, "3.11", cross.target("aarch64"))
    ns: dict[str, dict[str, str]] = {}
    exec((tmp_path / "sysconfig" / "_sysconfigdata__linux_aarch64-linux-gnu.py").read_text(), ns)
    got, root = ns["build_time_vars"], tmp_path.resolve() / "root"
    assert got["INCLUDEPY"] == f"{root}/usr/include/python3.11"
    assert got["LIBDIR"] == f"{root}/usr/lib/aarch64-linux-gnu"
    assert got["CFLAGS"] == f"-I{root}/usr/include/x -O2"
    assert got["prefix"] == "/usr"  # where the package installs on the target: unchanged
    assert got["SCRIPTDIR"] == "/usr/library"  # not a /usr/lib path


def test_zig_wrappers_for_the_target_and_for_this_machine(tmp_path: Path) -> None:
    assert '-target "aarch64-linux-gnu.${NIGHTLY_ZIG_GLIBC:-2.17}"' in zig.wrapper_text(
        "cc", "aarch64-linux-gnu")
    assert '-target "x86_64-linux-gnu.${NIGHTLY_ZIG_GLIBC:-2.17}"' in zig.wrapper_text("cc")
    zig.write_wrappers(tmp_path, "aarch64-linux-gnu")
    assert "aarch64-linux-gnu" in (tmp_path / "bin" / "c++").read_text()
    assert (tmp_path / "bin" / "g++").resolve() == (tmp_path / "bin" / "c++").resolve()
    kept = "ziglang/lib/libc/include/{}/stdio.h"
    include = cross.target("aarch64").zig_include
    assert zig._kept(kept.format("aarch64-linux-gnu"), include)
    assert not zig._kept(kept.format("aarch64-linux-gnu"))  # x86's copy drops it
    assert not zig._kept(kept.format("x86-linux-gnu"), include)


def test_a_build_for_another_architecture_gets_the_cross_environment() -> None:
    import platform

    from nightly.builds.run.jobs import cross_env
    from nightly.config import load
    from nightly.core.matrix import Build

    config = load(Path(__file__).resolve().parents[2] / "configs" / "demo-beyond-cuda.toml")
    build = Build(package="manywheel", python="3.13", cuda="cpu")
    env = cross_env(config, build, "local", "aarch64")
    assert env["NIGHTLY_ARCH"] == "aarch64"
    assert env["AUDITWHEEL_PLAT"] == "manylinux_2_28_aarch64"  # the build's, not uname -m's
    assert env["NIGHTLY_CROSS_PYTHON"] == "3.13"
    assert cross_env(config, build, "local", platform.machine()) == {}  # built natively
    assert cross_env(config, build, "container", "aarch64") == {}  # an image's own arch
    assert cross_env(config, Build(package="conda", python="3.13", cuda="cpu"), "local",
                     "aarch64") == {}
