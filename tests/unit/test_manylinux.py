"""The manylinux policy: its spellings, where it is declared (builder, matrix), what the
check of a build's packages refuses, the toolchain an image or a host build gets for it,
and the glibc a libtorch zip's libraries need."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest

from nightly.builds.run.jobs import manylinux_env
from nightly.config import load
from nightly.core import manylinux
from nightly.core.specparse import parse_spec
from nightly.errors import ConfigError
from nightly.images import context, sysroot
from tests.support import policy_config
from tests.support.policy_config import load_config


def _rec(v: manylinux.Verdict) -> dict[str, object]:
    """A verdict's record in its state.json form."""
    assert v.record is not None
    return v.record.to_json()


def _config(tmp_path: Path, matrix_policy: str = "", builder_policy: str = "") -> Any:
    return load_config(tmp_path, matrix_policy, builder_policy)


@pytest.mark.parametrize(
    ("text", "policy"),
    [("2_28", "2_28"), ("2.17", "2_17"), ("manylinux_2_34", "2_34"), ("manylinux2014", "2_17"),
     ("OFF", "off"), ("", "")],
)
def test_policy_spellings(text: str, policy: str) -> None:
    assert manylinux.parse_policy(text) == policy


@pytest.mark.parametrize("text", ["2_1", "3_5", "latest", "musllinux_1_2", "2-28"])
def test_bad_policies_are_refused_with_the_spelling_to_use(text: str) -> None:
    with pytest.raises(ValueError, match='write "2_28"'):
        manylinux.parse_policy(text)


def _wheel(tmp_path: Path, platform: str) -> Path:
    p = tmp_path / f"demo-1.0-cp311-cp311-{platform}.whl"
    p.write_bytes(b"")
    return p


@pytest.mark.parametrize(
    ("policy", "platform", "ok"),
    [
        ("2_28", "manylinux_2_17_x86_64.manylinux2014_x86_64", True),
        ("2_28", "manylinux_2_28_x86_64", True),
        ("2_28", "manylinux_2_34_x86_64", False),
        ("2_28", "linux_x86_64", False),
        ("2_17", "manylinux_2_26_x86_64", False),
        ("", "manylinux_2_36_x86_64", True),  # none declared: any manylinux tag
        ("", "linux_x86_64", True),  # ... shipped with a note (no policy to meet)
        ("off", "linux_x86_64", True),  # opted out
    ],
)
def test_the_check_of_a_manywheel_builds_wheels(tmp_path: Path, policy: str, platform: str,
                                                ok: bool) -> None:
    v = manylinux.check_packages("manywheel", policy, [_wheel(tmp_path, platform)])
    assert (v.reason is None) == ok, v.reason
    assert _rec(v)["tags"] == [platform]
    assert _rec(v)["policy"] == policy
    assert any(platform in n for n in v.notes)
    shown = manylinux.describe(v.record)
    assert shown.startswith(f"policy {policy or 'none'}: ")
    assert shown.endswith("linux_x86_64" if platform == "linux_x86_64"
                          else "manylinux_" + str(_rec(v)["glibc"]).replace(".", "_"))
    if not ok:
        assert "nothing of it is published" in (v.reason or "")
    if not policy and platform == "linux_x86_64":
        assert "is no manylinux wheel" in v.notes[1]


def test_other_packages_are_not_wheel_checked(tmp_path: Path) -> None:
    assert manylinux.check_packages("conda", "2_28", [_wheel(tmp_path, "linux_x86_64")]) == \
        manylinux.Verdict()


def test_a_libtorch_zip_records_the_glibc_its_libraries_need(tmp_path: Path) -> None:
    elf = Path(shutil.which("true") or "/bin/true")
    with elf.open("rb") as f:
        want = manylinux.elf_glibc(f)
    assert want >= (2, 2)
    z = tmp_path / "libtorch-shared-with-deps-1.0.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.write(elf, "libtorch/lib/libx.so")
        zf.writestr("libtorch/build-version", "1.0\n")
    v = manylinux.check_packages("libtorch", "", [z])
    assert v.reason is None
    assert _rec(v)["glibc"] == f"{want[0]}.{want[1]}"
    assert v.notes == (f"glibc: {z.name} needs glibc {want[0]}.{want[1]} (newest GLIBC_ symbol "
                       "version of its libraries)",)
    assert manylinux.describe(v.record) == f"needs glibc {want[0]}.{want[1]}"
    # A static zip (archives, no versioned symbol) says so rather than nothing.
    static = tmp_path / "libtorch-static-without-deps-1.0.zip"
    with zipfile.ZipFile(static, "w") as zf:
        zf.writestr("libtorch/lib/libx.a", b"!<arch>\n" + b"\0" * 100)
    v = manylinux.check_packages("libtorch", "", [static])
    assert _rec(v) == {"zips": {static.name: ""}}
    assert v.notes == (f"glibc: {static.name} needs no particular glibc (no versioned GLIBC_ "
                       "symbol in it: static archives leave that to the program that links "
                       "them)",)
    assert manylinux.describe(v.record) == ""


# -- where a policy is declared ------------------------------------------------------------


def test_a_builder_takes_the_matrix_policy_unless_it_declares_its_own(tmp_path: Path) -> None:
    c = _config(tmp_path, matrix_policy='manylinux = "2.28"')
    assert c.builders["demo"].manylinux == "2_28"
    b = next(b for b in c.builds if b.id == "manywheel_3.11_cpu")
    assert c.manylinux_for(b) == "2_28"
    conda = next(b for b in c.builds if b.package == "conda")
    assert c.manylinux_for(conda) == ""
    c = _config(tmp_path, matrix_policy='manylinux = "2_28"', builder_policy='manylinux = "2_17"')
    assert c.manylinux_for(b, "container") == "2_17"
    assert c.manylinux_for(b, "local") == "2_28"  # host builds: the matrix's
    c = _config(tmp_path)
    assert c.manylinux_for(b) == ""
    assert c.builders["demo"].toolchain == "system"


@pytest.mark.parametrize(
    ("matrix_policy", "builder_policy", "key"),
    [('manylinux = "newest"', "", "matrix.linux.manywheel.manylinux"),
     ("", 'manylinux = "2_3"', "builders.demo.manylinux"),
     ("", 'base_image = "@demo"', "builders.demo.base_image")],
)
def test_bad_declarations_name_their_key(tmp_path: Path, matrix_policy: str,
                                         builder_policy: str, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        _config(tmp_path, matrix_policy, builder_policy)
    assert e.value.key == key


def test_an_older_policy_gives_the_image_the_sysroot_toolchain() -> None:
    plain = parse_spec("demo", {"compilers": ["gcc-11", "g++-11"], "cudas": ["cpu", "11.8"]})
    policy = parse_spec("demo", {"compilers": ["gcc-11", "g++-11"], "cudas": ["cpu", "11.8"],
                                 "manylinux": "2_28"})
    newer = parse_spec("demo", {"manylinux": "2_36"})
    assert (plain.toolchain, policy.toolchain, newer.toolchain) == ("system", "sysroot", "system")
    assert plain.manylinux_tag() == "manylinux_2_36_x86_64"
    assert policy.manylinux_tag() == "manylinux_2_31_x86_64"
    # The base is the same; the toolchain is part of the interpreter layer and above.
    assert plain.base_hash() == policy.base_hash()
    assert plain.tag_for("cpu") != policy.tag_for("cpu")
    # Every image has g++ and auditwheel, declared or not.
    assert "g++" in plain.base_packages
    assert "auditwheel" in plain.pip_tools
    text = context.cpu_dockerfile(policy, {})
    assert f"COPY toolchain {sysroot.IMAGE_PATH}" in text
    assert f'CC="{sysroot.IMAGE_PATH}/bin/gcc"' in text
    assert "command -v $c" in text  # a base without g++ fails its build, saying so
    assert "COPY toolchain" not in context.cpu_dockerfile(plain, {})
    # CUDA 11's nvcc uses the gcc-11 wrappers.
    env = context.cuda_toolchain_env(policy, "cu118")
    assert env["NVCC_CCBIN"].endswith("/gcc11/g++")
    assert context.cuda_toolchain_env(plain, "cu118") == {}


def test_a_base_image_replaces_the_debootstrapped_base() -> None:
    s = parse_spec("demo", {"base_image": "quay.io/pypa/manylinux_2_28_x86_64",
                            "manylinux": "2_28"})
    assert s.base_tag() == "quay.io/pypa/manylinux_2_28_x86_64"
    assert context.cpu_dockerfile(s, {}).startswith("FROM quay.io/pypa/manylinux_2_28_x86_64\n")
    other = parse_spec("demo", {"base_image": "quay.io/pypa/manylinux2014_x86_64",
                                "manylinux": "2_28"})
    assert s.tag_for("cpu") != other.tag_for("cpu")


def test_host_builds_get_the_toolchain_only_when_the_host_glibc_is_newer(tmp_path: Path) -> None:
    c = _config(tmp_path, matrix_policy='manylinux = "2_28"')
    b = next(b for b in c.builds if b.id == "manywheel_3.11_cpu")
    local = manylinux_env(c, b, "local")
    assert local["NIGHTLY_MANYLINUX"] == "2_28"
    assert local["AUDITWHEEL_PLAT"] == "manylinux_2_28_x86_64"
    if sysroot.host_glibc() > (2, 28):
        assert local["CC"].endswith(f"/toolchains/bullseye-glibc2.31-{sysroot.REVISION}/bin/gcc")
        assert local["LDSHARED"] == local["CC"] + " -pthread -shared"
        assert sysroot.ENV_CACHE in local
    container = manylinux_env(c, b, "container")
    assert "CC" not in container  # the image has its own
    assert container["AUDITWHEEL_PLAT"] == "manylinux_2_28_x86_64"
    newest = manylinux.parse_policy(f"2_{sysroot.host_glibc()[1]}")
    assert sysroot.host_env(manylinux.glibc_of(newest), tmp_path) == {}


def test_the_sysroot_links_are_made_relative(tmp_path: Path) -> None:
    root = tmp_path / "sysroot"
    (root / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    (root / "lib" / "x86_64-linux-gnu" / "ld-2.31.so").write_text("")
    (root / "lib64").mkdir()
    (root / "lib64" / "ld-linux-x86-64.so.2").symlink_to("/lib/x86_64-linux-gnu/ld-2.31.so")
    (root / "lib64" / "rel").symlink_to("ld-linux-x86-64.so.2")
    assert sysroot.relink(root) == 1
    assert (root / "lib64" / "ld-linux-x86-64.so.2").resolve() == \
        (root / "lib" / "x86_64-linux-gnu" / "ld-2.31.so").resolve()
    assert str((root / "lib64" / "rel").readlink()) == "ld-linux-x86-64.so.2"


def test_wrappers_find_their_sysroot_beside_them(tmp_path: Path) -> None:
    sysroot.write_wrappers(tmp_path, {"gcc11": "-11"})
    gxx = (tmp_path / "gcc11" / "g++").read_text()
    assert "exec g++-11 --sysroot=" in gxx
    assert "-static-libstdc++" in gxx
    assert '"$here/../sysroot"' in gxx
    assert "-static-libstdc++" not in (tmp_path / "bin" / "gcc").read_text()
    assert (tmp_path / "bin" / "c++").resolve() == (tmp_path / "bin" / "g++").resolve()
    assert (tmp_path / "bin" / "gcc").stat().st_mode & 0o111


def test_status_and_report_show_the_policy_and_what_was_reached(tmp_path: Path) -> None:
    import datetime as dt
    import json

    from rich.console import Console

    from nightly.report import html as report
    from nightly.report import status as status_view
    from nightly.workspace import Day

    day = Day(tmp_path, dt.date(2024, 5, 1))
    day.create()
    wheel = "demo-1.0-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    builds = {
        "manywheel_3.11_cpu": {
            "status": "succeeded", "attempts": 1, "started": 1.0, "ended": 2.0, "duration_s": 1.0,
            "packages": [{"name": wheel, "path": f"packages/manywheel/cpu/{wheel}", "size": 10,
                          "sha256": "00"}],
            "manylinux": manylinux.check_packages("manywheel", "2_28",
                                                  [_wheel(tmp_path, wheel.split("-")[-1][:-4])]
                                                  ).record.to_json(),  # type: ignore[union-attr]
        },
        "libtorch_shared-with-deps_cpu": {
            "status": "succeeded", "attempts": 1, "started": 1.0, "ended": 2.0, "duration_s": 1.0,
            "manylinux": {"glibc": "2.36", "zips": {"libtorch.zip": "2.36"}},
        },
    }
    day.state_path.write_text(json.dumps({"builds": builds, "meta": {"date": day.name}}))
    console = Console(record=True, width=220, color_system=None)
    status_view.show(day, console=console)
    out = console.export_text()
    assert "policy 2_28: manylinux_2_17" in out
    assert "needs glibc 2.36" in out
    page = report.render_html(day, None)
    assert 'data-manylinux="policy 2_28: manylinux_2_17"' in page
    assert 'data-manylinux="needs glibc 2.36"' in page


def test_a_policy_on_another_package_type_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "nightly.toml"
    p.write_text(policy_config.text().replace(
        '[matrix.linux.conda]\npythons = ["3.11"]\ncudas = ["cpu"]\n',
        '[matrix.linux.conda]\npythons = ["3.11"]\ncudas = ["cpu"]\nmanylinux = "2_28"\n'))
    with pytest.raises(ConfigError, match="manywheel and libtorch builds only") as e:
        load(p)
    assert e.value.key == "matrix.linux.conda.manylinux"
