"""debootstrap's and the cross root's apt downloads show progress (issue 50), as
nightly.images.transfer's other downloads do: packages (debootstrap) or bytes (apt) done of
the total, in plain timestamped lines without a terminal (no control codes). Stand-in
debootstrap and apt-get programs: these tests run no network."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nightly.images import cross, debootstrap, rootfs

LINE = re.compile(r"^\d\d:\d\d:\d\d ")
PACKAGES = ("base-files", "bash", "libc6", "patchelf", "python3")

# debootstrap's own lines: --print-debs resolves and prints the packages (the required ones a
# line each, then the base ones on one line; its I: lines go to stderr); a run
# retrieves the indexes (no version: not a package), then each package (a cached .deb is
# validated, not retrieved), then extracts. The target folder is the last-but-one argument.
FAKE_DEBOOTSTRAP = f"""#!/bin/sh
for a in "$@"; do prev="$target"; target="$a"; done
target="$prev"
if [ "$1" = --print-debs ]; then
  echo "I: Retrieving InRelease" >&2
  echo "I: Validating Packages" >&2
  echo "I: Resolving dependencies of required packages..." >&2
  echo
  for p in {' '.join(PACKAGES[:3])}; do echo "$p"; done
  echo "{' '.join(PACKAGES[3:])} bash"
  exit 0
fi
echo "I: Retrieving InRelease"
echo "I: Retrieving Packages"
echo "I: Validating Packages"
for p in {' '.join(PACKAGES)}; do
  echo "I: Retrieving $p 1.0-1"
  echo "I: Validating $p 1.0-1"
  [ "$p" = "$FAIL_AT" ] && {{ echo "E: Couldn't download package $p"; exit 1; }}
done
mkdir -p "$target/tmp" "$target/var/cache/apt/archives"
echo "I: Base system installed successfully."
"""


@pytest.fixture
def fake_debootstrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "debootstrap"
    fake.write_text(FAKE_DEBOOTSTRAP)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return fake


def test_debootstrap_shows_packages_done_of_its_total(tmp_path: Path, fake_debootstrap: Path
                                                      ) -> None:
    lines: list[str] = []
    log = tmp_path / "debootstrap.log"
    code = debootstrap.run([str(fake_debootstrap), "bookworm", str(tmp_path / "t"), "http://m"],
                           log, "base: debootstrap bookworm", lines.append)
    assert code == 0
    assert lines[0].endswith("base: debootstrap bookworm: started, 5 packages")
    # Each package counts once (retrieved, then validated); indexes are not packages.
    assert lines[1].endswith("1 packages of 5 packages (20%)")
    assert lines[-2].endswith("5 packages of 5 packages (100%)")
    assert "base: debootstrap bookworm: done, 5 packages in" in lines[-1]
    assert len(lines) == 7, lines
    assert all(LINE.match(line) for line in lines), lines
    assert not any("\x1b" in line or "\r" in line for line in lines)
    text = log.read_text()  # its whole output, in its log as before
    assert "I: Retrieving libc6 1.0-1" in text
    assert "Base system installed successfully" in text


def test_a_failed_debootstrap_says_so_and_the_rootfs_error_quotes_its_log(
        tmp_path: Path, fake_debootstrap: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL_AT", "libc6")
    lines: list[str] = []
    with pytest.raises(rootfs.RootfsError, match=r"(?s)debootstrap failed \(exit 1.*"
                                                 r"Couldn't download package libc6"):
        rootfs.bootstrap(suite="bookworm", packages=("patchelf",), key="k1", mirror="http://m",
                         cache=tmp_path / "cache", log=lines.append)
    assert "failed, 3 packages in" in lines[-1]
    assert not (tmp_path / "cache" / "rootfs" / "bookworm-k1.partial").exists()


def test_bootstrap_makes_the_rootfs_with_progress(tmp_path: Path, fake_debootstrap: Path
                                                  ) -> None:
    lines: list[str] = []
    root = rootfs.bootstrap(suite="bookworm", packages=("patchelf",), key="k1",
                            mirror="http://m", cache=tmp_path / "cache", log=lines.append)
    assert (root / rootfs.MARKER).exists()
    assert any(line.endswith("base: debootstrap bookworm: started, 5 packages") for line in lines)
    assert any("base: debootstrap bookworm: done, 5 packages in" in line for line in lines)


def test_debootstrap_without_a_total_counts_packages(tmp_path: Path) -> None:
    """--print-debs failing (an old debootstrap): the packages are counted, no total."""
    fake = tmp_path / "debootstrap"
    fake.write_text('#!/bin/sh\n[ "$1" = --print-debs ] && { echo nope; exit 2; }\n'
                    'echo "I: Retrieving bash 5.2-1"\necho "I: Retrieving libc6 2.36-1"\n')
    fake.chmod(0o755)
    lines: list[str] = []
    log = tmp_path / "d.log"
    assert debootstrap.run([str(fake), "x"], log, "base", lines.append) == 0
    assert lines[0].endswith("base: started")
    assert "base: done, 2 packages in" in lines[-1]
    assert "--print-debs failed (exit 2)" in log.read_text()


def test_the_cross_roots_apt_download_shows_bytes_of_apts_total(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """make_root's `apt-get install --download-only`: the total from apt's --print-uris
    listing (two files, 1000 + 2500 bytes), the bytes from the archives folder as it fills
    (a .deb left there before is not counted); a failure is a CrossError with apt's words."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "apt-get"
    fake.write_text(
        "#!/bin/sh\n"
        'd="$(dirname "$APT_CONFIG")/cache/archives"\n'
        'case "$*" in\n'
        "  *update*) exit 0 ;;\n"
        "  *--print-uris*) echo \"'http://deb.example/a.deb' a_1_arm64.deb 1000 SHA256:aa\"\n"
        "                  echo \"'http://deb.example/b.deb' b_1_arm64.deb 2500 SHA256:bb\" ;;\n"
        '  *) head -c 1000 /dev/zero > "$d/a_1_arm64.deb"; head -c 2500 /dev/zero > "$d/b_1_arm64.deb"\n'
        '     echo "E: Unable to fetch some archives"; exit 100 ;;\n'
        "esac\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    cache = tmp_path / "cache"
    old = cache / "apt-bookworm-arm64" / "cache" / "archives" / "old_1_arm64.deb"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"x" * 7000)
    lines: list[str] = []
    with pytest.raises(cross.CrossError, match="Unable to fetch some archives"):
        cross.make_root(cache, "aarch64", "3.11", "http://deb.example/debian", lines.append)
    meter = [line for line in lines if "cross: arm64 packages" in line]
    assert meter[0].endswith("cross: arm64 packages: started, 3.5 kB")
    assert re.search(r"cross: arm64 packages: failed, 3\.5 kB in \d+ s$", meter[-1]), meter
    assert all(LINE.match(line) for line in meter)
