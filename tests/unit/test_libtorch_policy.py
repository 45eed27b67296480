"""libtorch zips under a declared glibc policy ([matrix.linux.libtorch] manylinux): the
configuration, the environment its recipe gets, and the check that fails a zip needing a
newer glibc."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from nightly.builds.run.jobs import manylinux_env
from nightly.config import load
from nightly.core import manylinux
from nightly.errors import ConfigError
from nightly.images import sysroot

REPO = Path(__file__).resolve().parents[2]

CONFIG = """\
[project]
name = "demo"
source = "."
base_version = "1.0.0"

[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]
manylinux = "2_28"
toolchain = "zig"

[matrix.linux.libtorch]
variants = ["shared-with-deps"]
cudas = ["cpu"]
{libtorch}

[[machines]]
name = "a"
platform = "linux"
queues = 1
executor = "local"
"""


def _rec(v: manylinux.Verdict) -> dict[str, object]:
    """A verdict's record in its state.json form."""
    assert v.record is not None
    return v.record.to_json()


def _zip_of(tmp_path: Path) -> tuple[Path, tuple[int, int]]:
    """A zip whose library is this machine's `true` (an ELF file needing some GLIBC_X.Y)."""
    elf = Path(shutil.which("true") or "/bin/true")
    with elf.open("rb") as f:
        need = manylinux.elf_glibc(f)
    assert need > (2, 5), "this test needs an ELF file with versioned glibc symbols"
    z = tmp_path / "libtorch-shared-with-deps-1.0.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.write(elf, "libtorch/lib/libx.so")
        zf.writestr("libtorch/build-version", "1.0\n")
    return z, need


def test_a_zip_that_needs_a_newer_glibc_than_the_policy_fails_with_the_reason(
    tmp_path: Path,
) -> None:
    z, need = _zip_of(tmp_path)
    older = f"{need[0]}_{need[1] - 1}"
    v = manylinux.check_packages("libtorch", older, [z])
    assert v.reason is not None
    assert v.reason.startswith(f"manylinux policy {older} not met: {z.name} needs glibc "
                               f"{need[0]}.{need[1]}, newer than glibc {need[0]}.{need[1] - 1}")
    assert "nothing of it is published" in v.reason
    assert _rec(v)["policy"] == older
    assert _rec(v)["glibc"] == f"{need[0]}.{need[1]}"


@pytest.mark.parametrize("policy", ["same", "off", ""])
def test_a_zip_within_its_policy_or_without_one_passes(tmp_path: Path, policy: str) -> None:
    z, need = _zip_of(tmp_path)
    if policy == "same":
        policy = f"{need[0]}_{need[1]}"
    v = manylinux.check_packages("libtorch", policy, [z])
    assert v.reason is None
    assert _rec(v)["glibc"] == f"{need[0]}.{need[1]}"
    assert ("policy" in _rec(v)) == (policy not in ("", "off"))


def test_the_libtorch_policy_gives_its_recipe_the_sysroot_toolchain(tmp_path: Path) -> None:
    p = tmp_path / "nightly.toml"
    p.write_text(CONFIG.format(libtorch='manylinux = "2.28"'))
    c = load(p)
    b = next(b for b in c.builds if b.package == "libtorch")
    assert c.manylinux_for(b, "local") == c.manylinux_for(b, "container") == "2_28"
    env = manylinux_env(c, b, "local")
    assert env["NIGHTLY_MANYLINUX"] == "2_28"
    # The sysroot's g++ even where the manywheels chose zig: CMake projects of any kind
    # build with it, and it links libstdc++ statically.
    assert env["NIGHTLY_MANYLINUX_TOOLCHAIN"] == "sysroot"
    if sysroot.host_glibc() > (2, 28):
        assert env["CXX"].endswith("/bin/g++")
        assert "bullseye-glibc" in env["CXX"]
    # Without a declaration: no policy, as before.
    p.write_text(CONFIG.format(libtorch=""))
    c = load(p)
    b = next(b for b in c.builds if b.package == "libtorch")
    assert c.manylinux_for(b, "local") == ""
    assert manylinux_env(c, b, "local") == {}


def test_a_bad_libtorch_policy_names_its_key(tmp_path: Path) -> None:
    p = tmp_path / "nightly.toml"
    p.write_text(CONFIG.format(libtorch='manylinux = "3_1"'))
    with pytest.raises(ConfigError) as e:
        load(p)
    assert e.value.key == "matrix.linux.libtorch.manylinux"


def test_the_demo_declares_its_libtorch_policy() -> None:
    c = load(REPO / "nightly.toml")
    b = next(b for b in c.builds if b.id == "libtorch_shared-with-deps_cpu")
    assert c.manylinux_for(b, "local") == "2_28"
