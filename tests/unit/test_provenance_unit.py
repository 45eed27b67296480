"""Provenance statements, signing and verifying (securesystemslib), key files, and the
canonical forms of zips and conda packages (nightly.builds.repro.reproducible)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from nightly import provenance
from nightly.builds.repro import check as repro_check
from nightly.builds.repro.reproducible import normalise_conda, normalise_packages, normalise_zip, source_epoch
from nightly.core.matrix import Build
from nightly.errors import UsageError

SHA = "ab" * 32


def facts(**kw: object) -> provenance.BuildFacts:
    base: dict[str, object] = dict(
        name="demo-1.0-cp311-cp311-linux_x86_64.whl", sha256=SHA,
        source_url="https://user:hunter2@git.example.com/demo.git", commit="c" * 40,
        branch="main", build_id="manywheel_3.11_cpu", package="manywheel", python="3.11",
        cuda="cpu", image="registry.example.com/builder:cpu", executor="container",
        machine="m1", source_date_epoch="1700000000", started=1700000100.0,
        finished=1700000200.0, nightly_version="0.1.0", dependencies=(("setuptools.whl", "cd" * 32),),
        invocation="2024_05_01/nightly",
    )
    base.update(kw)
    return provenance.BuildFacts(**base)  # type: ignore[arg-type]


@pytest.fixture
def keys(tmp_path: Path) -> tuple[object, object, object]:
    priv, pub = provenance.keygen(tmp_path / "k")
    _other, other_pub = provenance.keygen(tmp_path / "o", "ecdsa-p256")
    return (provenance.load_signer(priv), provenance.load_public_key(pub),
            provenance.load_public_key(other_pub))


def test_keygen_private_key_is_0600_and_never_overwritten(tmp_path: Path) -> None:
    priv, pub = provenance.keygen(tmp_path / "k")
    assert priv.stat().st_mode & 0o777 == 0o600
    assert b"PRIVATE KEY" in priv.read_bytes()
    assert b"PUBLIC KEY" in pub.read_bytes()
    with pytest.raises(provenance.ProvenanceError, match="never overwritten"):
        provenance.keygen(tmp_path / "k")
    with pytest.raises(UsageError, match="private key"):
        provenance.load_public_key(priv)


def test_statement_is_in_toto_v1_with_slsa_v1_and_no_credential() -> None:
    stmt: dict[str, Any] = provenance.statement(facts())
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["predicateType"] == "https://slsa.dev/provenance/v1"
    assert stmt["subject"] == [{"name": facts().name, "digest": {"sha256": SHA}}]
    bd = stmt["predicate"]["buildDefinition"]
    assert bd["resolvedDependencies"][0]["digest"] == {"gitCommit": "c" * 40}
    assert bd["resolvedDependencies"][1] == {"uri": "setuptools.whl", "digest": {"sha256": "cd" * 32}}
    assert bd["externalParameters"]["sourceDateEpoch"] == "1700000000"
    assert stmt["predicate"]["runDetails"]["metadata"]["startedOn"] == "2023-11-14T22:15:00Z"
    assert "hunter2" not in json.dumps(stmt)


def test_verify_passes_and_names_each_failure(keys: tuple[object, object, object]) -> None:
    signer, pub, other_pub = keys
    bundle = provenance.sign(provenance.statement(facts()), signer)
    assert bundle.endswith(b"\n")
    assert bundle.count(b"\n") == 1
    name = facts().name
    ok = provenance.verify(name, SHA, bundle, pub)
    assert ok.ok
    assert any("c" * 40 in line for line in ok.summary)
    assert "does not verify with key" in provenance.verify(name, SHA, bundle, other_pub).reason
    assert "(the file was altered)" in provenance.verify(name, "00" * 32, bundle, pub).reason
    assert "(provenance of another package)" in provenance.verify("x.whl", SHA, bundle, pub).reason
    assert "is missing" in provenance.verify(name, SHA, None, pub).reason
    assert provenance.verify(name, SHA, bundle, pub, source_commit="ccccc").ok
    assert "not ddd" in provenance.verify(name, SHA, bundle, pub, source_commit="ddd").reason
    # A statement changed after signing: the signature no longer verifies.
    env = json.loads(bundle)
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["subject"][0]["digest"]["sha256"] = "00" * 32
    env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    forged = json.dumps(env).encode()
    assert "does not verify" in provenance.verify(name, "00" * 32, forged, pub).reason


def _zip(path: Path, entries: list[tuple[str, bytes, int, tuple[int, ...]]]) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, data, mode, when in entries:
            info = zipfile.ZipInfo(name, date_time=when)  # type: ignore[arg-type]
            info.external_attr = mode << 16
            z.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)


def test_zips_of_the_same_files_become_the_same_bytes_and_record_stays_valid(tmp_path: Path) -> None:
    body = b"print('hi')\n"
    digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
    record = f"demo/__init__.py,sha256={digest},{len(body)}\ndemo-1.0.dist-info/RECORD,,\n".encode()
    files = [("demo-1.0.dist-info/RECORD", record), ("demo/__init__.py", body),
             ("demo-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\n")]
    a, b = tmp_path / "a.whl", tmp_path / "b.whl"
    _zip(a, [(n, d, 0o100600, (2024, 1, 1, 0, 0, 0)) for n, d in files])
    _zip(b, [(n, d, 0o100664, (2025, 6, 1, 12, 0, 0)) for n, d in reversed(files)])
    assert a.read_bytes() != b.read_bytes()
    notes = normalise_packages([a, b], {"SOURCE_DATE_EPOCH": "1700000000"})
    assert len(notes) == 2
    assert a.read_bytes() == b.read_bytes()
    with zipfile.ZipFile(a) as z:
        names = z.namelist()
        assert names[0] == "demo/__init__.py"
        assert names[-1] == "demo-1.0.dist-info/RECORD"
        assert all(i.date_time == (2023, 11, 14, 22, 13, 20) for i in z.infolist())
        assert all((i.external_attr >> 16) & 0o777 == 0o644 for i in z.infolist())
        assert z.read("demo-1.0.dist-info/RECORD") == record
    assert not normalise_zip(a, 1700000000)  # already canonical: untouched


def _conda(path: Path, stamp: int, mtime: int) -> None:
    def tar(members: dict[str, bytes]) -> bytes:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as t:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.uid, info.uname = len(data), mtime, 1000, "builder"
                t.addfile(info, io.BytesIO(data))
        return out.getvalue()

    from nightly.builds.repro.reproducible import _zstd

    zstd = _zstd()
    index = json.dumps({"name": "demo", "timestamp": stamp}).encode()
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", b'{"conda_pkg_format_version": 2}')
        z.writestr("pkg-demo.tar.zst", zstd.compress(tar({"lib/x.py": b"x = 1\n"})))
        z.writestr("info-demo.tar.zst", zstd.compress(tar({"info/index.json": index})))


def test_conda_packages_lose_their_build_time(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "demo.conda", tmp_path / "b" / "demo.conda"
    a.parent.mkdir()
    b.parent.mkdir()
    _conda(a, 1795519639710, 1795519639)
    _conda(b, 1795519691645, 1795519691)
    assert normalise_conda(a, 1700000000)
    assert normalise_conda(b, 1700000000)
    assert a.read_bytes() == b.read_bytes()
    from nightly.builds.repro.reproducible import _zstd

    with zipfile.ZipFile(a) as z:
        assert z.namelist()[0] == "metadata.json"
        info = _zstd().decompress(z.read("info-demo.tar.zst"))
    with tarfile.open(fileobj=io.BytesIO(info)) as t:
        m = t.getmember("info/index.json")
        assert (m.mtime, m.uid, m.uname) == (1700000000, 0, "")
        assert json.loads(t.extractfile(m).read())["timestamp"] == 1700000000000  # type: ignore[union-attr]


def test_source_epoch_is_the_commit_time_or_the_newest_mtime(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.c").write_text("int a;\n")
    os.utime(plain / "a.c", (1600000000, 1600000000))
    (plain / ".nightly-source.json").write_text("{}")  # nightly's own marker: not the source
    se = source_epoch(plain)
    assert (se.epoch, se.origin) == (1600000000, "mtime")


def test_sample_checks_one_build_per_package_type() -> None:
    builds = [Build(package="manywheel", python=p, cuda=c)
              for p in ("3.11", "3.10") for c in ("cpu", "cu130")]
    builds.append(Build(package="conda", python="3.11", cuda="cpu"))
    assert repro_check.selected("sample", builds) == {"manywheel_3.10_cpu", "conda_3.11_cpu"}
    assert repro_check.selected("all", builds) == {b.id for b in builds}
    assert repro_check.selected("none", builds) == frozenset()


def test_a_long_report_is_cut_but_names_every_part_that_differs(tmp_path: Path) -> None:
    text = "\n".join([f"line {i}" for i in range(500)] + ["│   ├── demo/stamp.txt", "│ -1", "│ +2"])
    cut = repro_check.truncated(text, tmp_path / "r.txt")
    assert len(cut.splitlines()) < 200
    assert "├── demo/stamp.txt" in cut
    assert str(tmp_path / "r.txt") in cut


def test_cli_keygen_verify_and_their_bad_input(tmp_path: Path, nightly: Any) -> None:
    r = nightly("provenance", "keygen", str(tmp_path / "k"))
    assert r.code == 0, r.err
    secret = (tmp_path / "k" / "provenance.key").read_text()
    assert "PRIVATE" not in r.out + r.err
    assert secret not in r.out + r.err
    again = nightly("provenance", "keygen", str(tmp_path / "k"))
    assert again.code == 2
    assert again.err.count("\n") == 1
    assert "never overwritten" in again.err
    pkg = tmp_path / "demo-1.0-py3-none-any.whl"
    pkg.write_bytes(b"not really a wheel")
    signer = provenance.load_signer(tmp_path / "k" / "provenance.key")
    provenance.write(pkg, facts(name=pkg.name, sha256=hashlib.sha256(pkg.read_bytes()).hexdigest()),
                     signer)
    pub = str(tmp_path / "k" / "provenance.pub")
    ok = nightly("verify", "--key", pub, str(pkg))
    assert ok.code == 0, ok.out + ok.err
    assert ok.out.startswith("OK   ")
    pkg.write_bytes(b"not really a wheel!")
    bad = nightly("verify", "--key", pub, str(pkg))
    assert bad.code == 1
    assert "(the file was altered)" in bad.out
    assert bad.err == ""  # the reason is in the output, no second error line
    missing = nightly("verify", "--key", pub, str(tmp_path / "nothing.whl"))
    assert missing.code == 2
    assert "no such file" in missing.err
    private_as_public = nightly("verify", "--key", str(tmp_path / "k" / "provenance.key"), str(pkg))
    assert private_as_public.code == 2
    assert "private key" in private_as_public.err
    assert secret not in private_as_public.out + private_as_public.err
