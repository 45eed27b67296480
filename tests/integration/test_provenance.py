"""Signed provenance for real: a demo night (real recipes: a manywheel, a conda package and a
libtorch zip) publishes into a mirror folder; the mirror is served by a static web server
(Python's http.server, a subprocess); `nightly verify` checks every published package over
HTTP with the site's public key, and fails, naming the reason, for a package altered by one
byte, a provenance signed by another key, a provenance moved next to another package and a
missing provenance. `nightly promote` refuses a candidate whose provenance does not verify.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.net import free_port

REPO = Path(__file__).resolve().parents[2]
RunCli = Callable[..., tuple[int, str, str]]
BUILDS = ["manywheel_3.11_cpu", "conda_3.11_cpu", "libtorch_shared-with-deps_cpu"]


@pytest.fixture
def static_server(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A static web server over tmp_path/www: (folder, base URL)."""
    www = tmp_path / "www"
    www.mkdir()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory",
         str(www)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(base + "/", timeout=2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield www, base
    proc.terminate()
    proc.wait(timeout=10)


def demo_config(tmp_path: Path, key: Path, *, one_wheel: bool = False) -> Path:
    text = (REPO / "nightly.toml").read_text()
    if one_wheel:  # only the manywheel for Python 3.11, CPU
        head, _, rest = text.partition("[matrix.linux.manywheel]")
        text = head + '[matrix.linux.manywheel]\npythons = ["3.11"]\ncudas = ["cpu"]\n\n' + \
            rest[rest.index("[timeouts]"):]
    text = text.replace('source = "examples/demo"', f'source = "{REPO / "examples" / "demo"}"')
    text = text.replace('root = "nightlies"', f'root = "nightlies"\nrecipes = "{REPO / "recipes"}"')
    text += f'\n[provenance]\nkey = "{key}"\n'
    if os.geteuid() == 0:  # the key is a credential: root must say who builds (docs/security.md)
        text += '\n[executor.local]\nuser = "root"\n'
    config = tmp_path / "nightly.toml"
    config.write_text(text)
    return config


def verify(run_cli: RunCli, pub: Path, *targets: str) -> tuple[int, str]:
    code, out, err = run_cli(["verify", "--key", str(pub), *targets], timeout=120)
    return code, out + err


@pytest.mark.slow
def test_demo_night_verifies_over_http_and_fails_naming_the_reason(
    tmp_path: Path, run_cli: RunCli, static_server: tuple[Path, str]
) -> None:
    code, out, err = run_cli(["provenance", "keygen", str(tmp_path / "keys")])
    assert code == 0, err
    key, pub = tmp_path / "keys" / "provenance.key", tmp_path / "keys" / "provenance.pub"
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.read_text() not in out + err  # never printed
    config = demo_config(tmp_path, key)
    args = ["run", "--config", str(config), "--date", "2024_05_01"]
    for b in BUILDS:
        args += ["--select", b]
    code, out, err = run_cli(args, cwd=tmp_path, timeout=1200)
    assert code == 0, out[-3000:] + err[-3000:]

    www, base = static_server
    shutil.copytree(tmp_path / "mirror", www / "mirror")
    published = sorted(p.relative_to(www).as_posix() for p in (www / "mirror").rglob("*")
                       if p.suffix in (".whl", ".zip", ".conda"))
    assert {p.rsplit(".", 1)[1] for p in published} == {"whl", "zip", "conda"}, published
    for p in published:  # each with its provenance beside it
        assert (www / (p + ".provenance.json")).is_file(), p
    code, text = verify(run_cli, pub, *(f"{base}/{p}" for p in published))
    assert code == 0, text
    assert text.count("OK   ") == 3
    assert "build:   manywheel_3.11_cpu in host by local on local" in text

    (wheel,) = [p for p in published if p.endswith(".whl")]
    (zipped,) = [p for p in published if p.endswith(".zip")]
    # The index pages list each provenance next to its file, and pip still installs from them.
    folder = Path(wheel).parent
    page = (www / folder / "nightlydemo_nightly.html").read_text()
    assert f'{Path(wheel).name}.provenance.json#sha256=' in page
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-index", "--pre", "-d",
         str(tmp_path / "dl"), "--find-links", f"{base}/{folder}/nightlydemo_nightly.html",
         "nightlydemo"], capture_output=True, text=True, timeout=300, check=False)
    assert got.returncode == 0, got.stdout + got.stderr
    assert [p.name for p in (tmp_path / "dl").iterdir()] == [Path(wheel).name]

    def case(name: str, prepare: Callable[[Path], None]) -> str:
        folder = www / name
        folder.mkdir()
        target = folder / Path(wheel).name
        shutil.copy(www / wheel, target)
        shutil.copy(www / (wheel + ".provenance.json"), folder / (target.name + ".provenance.json"))
        prepare(target)
        code, text = verify(run_cli, pub, f"{base}/{name}/{target.name}")
        assert code == 1, text
        assert text.startswith("FAIL "), text
        return text

    def flip_one_byte(t: Path) -> None:
        data = bytearray(t.read_bytes())
        data[len(data) // 2] ^= 0x01
        t.write_bytes(bytes(data))

    assert "(the file was altered)" in case("altered", flip_one_byte)

    def sign_with_another_key(t: Path) -> None:
        from nightly import provenance

        other, _ = provenance.keygen(tmp_path / "other-keys")
        stmt = provenance.payload_of((www / (wheel + ".provenance.json")).read_bytes())
        (t.parent / (t.name + ".provenance.json")).write_bytes(
            provenance.sign(stmt, provenance.load_signer(other)))

    assert "the signature does not verify with key" in case("other-key", sign_with_another_key)

    def move_provenance(t: Path) -> None:
        shutil.copy(www / (zipped + ".provenance.json"), t.parent / (t.name + ".provenance.json"))

    text = case("moved", move_provenance)
    assert "the provenance is for libtorch-shared-with-deps-" in text
    assert "(provenance of another package)" in text

    def remove_provenance(t: Path) -> None:
        (t.parent / (t.name + ".provenance.json")).unlink()

    assert "no provenance: " in case("missing", remove_provenance)

    # --rebuild: the wheel built again here from its provenance has the same bytes.
    code, out, err = run_cli(["verify", "--key", str(pub), "--rebuild", "--config", str(config),
                              f"{base}/{wheel}"], cwd=tmp_path, timeout=900)
    assert code == 0, out[-3000:] + err[-3000:]
    assert "rebuilt: identical (sha256 " in out

    # A statement holds no credential: the night ran with a secret in its environment.
    day = tmp_path / "nightlies" / "2024_05_01"
    for f in day.rglob("*.provenance.json"):
        assert "s3cr3t" not in f.read_text()
        payload = json.loads(f.read_text().splitlines()[0])["payload"]
        import base64

        stmt = json.loads(base64.b64decode(payload))
        assert stmt["predicateType"] == "https://slsa.dev/provenance/v1"
        assert stmt["predicate"]["buildDefinition"]["externalParameters"]["sourceDateEpoch"]


@pytest.mark.slow
def test_promote_refuses_a_candidate_whose_provenance_does_not_verify(
    tmp_path: Path, run_cli: RunCli
) -> None:
    from nightly import provenance

    key, _ = provenance.keygen(tmp_path / "keys")
    config = demo_config(tmp_path, key, one_wheel=True)
    code, out, err = run_cli(["release", "2.0.0", "--rc", "1", "--config", str(config)],
                             cwd=tmp_path, timeout=1200)
    assert code == 0, out[-3000:] + err[-3000:]
    (prov,) = list((tmp_path / "nightlies").rglob("*.whl.provenance.json"))
    good = prov.read_bytes()
    other, _ = provenance.keygen(tmp_path / "other")
    stmt = provenance.payload_of(good)
    prov.write_bytes(provenance.sign(stmt, provenance.load_signer(other)))
    code, out, err = run_cli(["promote", "2.0.0", "--rc", "1", "--config", str(config)],
                             cwd=tmp_path, timeout=600)
    assert code == 1, out + err
    assert "refusing to promote" in err, err
    assert "does not verify with key" in err, err
    release = tmp_path / "mirror" / "whl" / "cpu"  # the release channel's folder
    assert not list(release.glob("*.whl"))
    prov.write_bytes(good)
    code, out, err = run_cli(["promote", "2.0.0", "--rc", "1", "--config", str(config)],
                             cwd=tmp_path, timeout=600)
    assert code == 0, out + err
    (wheel,) = release.glob("*.whl")
    assert (release / (wheel.name + ".provenance.json")).read_bytes() == good
