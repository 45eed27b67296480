"""Conda publishing against real clients: anaconda-client uploading to a loopback stand-in of
the anaconda.org API (tests/support/fake_anaconda.py), and a self-hosted channel folder indexed, solved and
installed with py-rattler.

The packages are made in the test with rattler-build's `assemble_package` (offline, no
recipe, no channel): a noarch .tar.bz2 and a linux-64 .conda, written 0600 like build outputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nightly import procs
from nightly.channels import anaconda as anaconda_mod
from nightly.channels import conda as conda_mod
from nightly.channels.anaconda import anaconda_copy, anaconda_upload, read_token
from nightly.channels.conda import (
    channel_key,
    install_from_channel,
    package_subdir,
    publish_to_channel,
    publish_to_store_channel,
)
from nightly.errors import PublishError
from tests.support.fake_anaconda import FakeAnaconda
from tests.support.s3 import moto_server

TOKEN = "nightly-anaconda-token-7c1e9a0b-DO-NOT-LEAK"
OWNER = "nightly-owner"
NAME = "nightly-conda-demo"
VERSION = "1.0.0.dev20240501"


def _assemble(
    out: Path, *, name: str, version: str, platform: str, text: str, tar_bz2: bool, depends: list[str]
) -> Path:
    from rattler_build import ArchiveType, assemble_package

    files = out / f"files-{name}-{platform}"
    (files / "share" / name).mkdir(parents=True)
    (files / "share" / name / "hello.txt").write_text(text)
    result = assemble_package(
        name=name,
        version=version,
        target_platform=platform,
        build_string="h0_0" if platform != "noarch" else "0",
        output_dir=out,
        files_dir=files,
        noarch="generic" if platform == "noarch" else None,
        depends=depends,
        summary=f"{name}, a package made by the nightly tests",
        license="BSD-3-Clause",
        archive_type=ArchiveType.TarBz2 if tar_bz2 else ArchiveType.Conda,
    )
    path = Path(result.path)
    path.chmod(0o600)  # like rattler-build's outputs
    return path


@pytest.fixture
def packages(tmp_path: Path) -> dict[str, Path]:
    """A noarch .tar.bz2 and a linux-64 .conda that depends on it."""
    out = tmp_path / "built"
    out.mkdir()
    noarch = _assemble(
        out, name=NAME, version=VERSION, platform="noarch", text="hello noarch\n", tar_bz2=True, depends=[]
    )
    native = _assemble(
        out,
        name=f"{NAME}-bin",
        version=VERSION,
        platform="linux-64",
        text="hello linux-64\n",
        tar_bz2=False,
        depends=[f"{NAME} =={VERSION}"],
    )
    return {"noarch": noarch, "native": native}


# ----------------------------------------------------------------------------- anaconda


def _cmdlines_with(secret: bytes) -> list[str]:
    """Every process on this machine whose command line contains `secret` (what `ps` shows)."""
    hits = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if secret in cmdline:
            hits.append(cmdline.replace(b"\0", b" ").decode("utf-8", "replace"))
    return hits


class _Spy:
    """Wraps procs.call (every command nightly runs goes through it): records argv and env,
    runs the real thing."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []
        self._call = procs.call

    def __call__(self, cmd: list[str], **kw: Any) -> procs.Finished:
        env = kw.get("env")
        if "binstar_client.scripts.cli" in cmd:
            assert isinstance(env, dict)
            self.calls.append((list(cmd), dict(env)))
        return self._call(cmd, **kw)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> _Spy:
    s = _Spy()
    monkeypatch.setattr(procs, "call", s)
    return s


@pytest.fixture
def server() -> Iterator[FakeAnaconda]:
    with FakeAnaconda(token=TOKEN, users=(OWNER, "release-owner")) as srv:
        yield srv


def test_anaconda_upload_reaches_the_server_with_the_token_in_the_header_only(
    server: FakeAnaconda, packages: dict[str, Path], spy: _Spy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-not-for-anaconda")
    seen_in_ps: list[list[str]] = []
    orig_handle = server.handle

    def handle(method: str, path: str, headers: object, raw: bytes) -> tuple[int, object]:
        if path.startswith("/stage/"):  # the client process is alive and waiting on us now
            seen_in_ps.append(_cmdlines_with(TOKEN.encode()))
        return orig_handle(method, path, headers, raw)

    server.handle = handle  # type: ignore[method-assign]

    for path in packages.values():
        anaconda_upload(path, user=OWNER, label="test", site=server.url, token=TOKEN)

    # The bytes that arrived are the files, under the owner and label asked for.
    for key, path in (("noarch", packages["noarch"]), ("linux-64", packages["native"])):
        basename = f"{key}/{path.name}"
        (dist,) = server.find(basename)
        assert dist.owner == OWNER
        assert dist.data == path.read_bytes()
        assert dist.labels == ["test"]
        assert dist.distribution_type == "conda"
    assert server.form_fields, "the multipart storage POST was never made"

    # The token came in the Authorization header of the API calls, never to the storage URL.
    api = [r for r in server.requests if not r.path.startswith("/s3-upload/")]
    assert api
    assert all(r.authorization == f"token {TOKEN}" for r in api)
    assert all(r.authorization is None for r in server.requests if r.path.startswith("/s3-upload/"))
    paths = [(r.method, r.path.split("/")[1]) for r in server.requests]
    for step in [("HEAD", ""), ("GET", "user"), ("POST", "package"), ("POST", "release"), ("POST", "stage")]:
        assert step in paths
    assert ("POST", "commit") in paths

    # ...and never on a command line: not in the argv we built, not in any process's cmdline.
    assert len(spy.calls) == 2
    for argv, env in spy.calls:
        assert not any(TOKEN in a for a in argv)
        assert env[anaconda_mod.TOKEN_ENV] == TOKEN
        assert "AWS_SECRET_ACCESS_KEY" not in env  # a minimal environment
        assert argv[argv.index("--user") : argv.index("--user") + 2] == ["--user", OWNER]
        assert argv[argv.index("--label") : argv.index("--label") + 2] == ["--label", "test"]
        assert "--force" in argv
    assert seen_in_ps == [[], []]


def test_anaconda_upload_again_with_force_replaces(server: FakeAnaconda, packages: dict[str, Path]) -> None:
    path = packages["noarch"]
    anaconda_upload(path, user=OWNER, label="test", site=server.url, token=TOKEN)
    anaconda_upload(path, user=OWNER, label="test", site=server.url, token=TOKEN)
    assert [d.data for d in server.find(path.name)] == [path.read_bytes()]
    assert any(r.method == "DELETE" and r.path.startswith("/dist/") for r in server.requests)


def test_anaconda_errors_never_contain_the_token(server: FakeAnaconda, packages: dict[str, Path]) -> None:
    path = packages["noarch"]
    server.fail("POST", "/stage/")
    with pytest.raises(PublishError) as info:
        anaconda_upload(path, user=OWNER, label="test", site=server.url, token=TOKEN)
    text = str(info.value)
    assert "Internal Server Error" in text
    assert path.name in text
    assert TOKEN not in text

    # A server that echoes the credentials back: the message is masked.
    orig_handle = server.handle

    def echo(method: str, path_: str, headers: object, raw: bytes) -> tuple[int, object]:
        if path_.startswith("/stage/"):
            return 500, {"error": f"refused {headers['Authorization']}"}  # type: ignore[index]
        return orig_handle(method, path_, headers, raw)

    server.handle = echo  # type: ignore[method-assign,assignment]
    with pytest.raises(PublishError) as info:
        anaconda_upload(path, user=OWNER, label="test", site=server.url, token=TOKEN)
    assert "refused token ***" in str(info.value)
    assert TOKEN not in str(info.value)
    server.handle = orig_handle  # type: ignore[method-assign]

    # A wrong token: 401, and neither token appears.
    wrong = "wrong-token-5d1f-also-secret"
    with pytest.raises(PublishError) as info:
        anaconda_upload(path, user=OWNER, label="test", site=server.url, token=wrong)
    assert wrong not in str(info.value)
    assert TOKEN not in str(info.value)
    assert not server.find(path.name)


def test_anaconda_copy_promotes_on_the_server_and_twice_is_harmless(
    server: FakeAnaconda, packages: dict[str, Path]
) -> None:
    path = packages["noarch"]
    anaconda_upload(path, user=OWNER, label="test", site=server.url, token=TOKEN)
    basename = channel_key(path)
    assert basename == f"noarch/{path.name}"

    anaconda_copy(
        OWNER, NAME, VERSION, basename, from_label="test", to_label="main", site=server.url, token=TOKEN
    )
    anaconda_copy(
        OWNER, NAME, VERSION, basename, from_label="test", to_label="main", site=server.url, token=TOKEN
    )
    (dist,) = server.find(path.name)
    assert dist.labels == ["test", "main"]

    # To another owner: a copy of the server's bytes; again is a no-op (--update).
    for _ in range(2):
        anaconda_copy(
            OWNER, NAME, VERSION, basename, from_label="test", to_label="main",
            to_owner="release-owner", site=server.url, token=TOKEN,
        )  # fmt: skip
    released = [d for d in server.find(path.name) if d.owner == "release-owner"]
    assert len(released) == 1
    assert released[0].data == path.read_bytes()
    assert released[0].labels == ["main"]
    copies = [r for r in server.requests if r.path.startswith("/copy/package/")]
    assert len(copies) == 4
    assert {r.method for r in copies} == {"PATCH"}
    assert all(r.authorization == f"token {TOKEN}" for r in copies)

    with pytest.raises(PublishError, match="does not exist") as info:
        anaconda_copy(
            OWNER, NAME, VERSION, basename, from_label="nope", to_label="main", site=server.url, token=TOKEN
        )
    assert TOKEN not in str(info.value)


def test_read_token_env_then_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    monkeypatch.delenv("NIGHTLY_TEST_TOKEN", raising=False)
    with pytest.raises(PublishError) as info:
        read_token("NIGHTLY_TEST_TOKEN", str(token_file))
    assert "NIGHTLY_TEST_TOKEN" in str(info.value)
    assert str(token_file) in str(info.value)

    token_file.write_text("  \n")
    with pytest.raises(PublishError, match="empty"):
        read_token("NIGHTLY_TEST_TOKEN", str(token_file))

    token_file.write_text("from-the-file\n")
    assert read_token("NIGHTLY_TEST_TOKEN", str(token_file)) == "from-the-file"
    monkeypatch.setenv("NIGHTLY_TEST_TOKEN", "from-the-env")
    assert read_token("NIGHTLY_TEST_TOKEN", str(token_file)) == "from-the-env"
    assert read_token("NIGHTLY_TEST_TOKEN", "") == "from-the-env"
    monkeypatch.setenv("NIGHTLY_TEST_TOKEN", "")
    token_file.unlink()
    with pytest.raises(PublishError) as info:
        read_token("NIGHTLY_TEST_TOKEN", str(token_file))
    assert "from-the" not in str(info.value)


# ----------------------------------------------------------------------------- self-hosted channel


def _repodata(channel: Path, subdir: str) -> dict[str, dict[str, object]]:
    data = json.loads((channel / subdir / "repodata.json").read_text())
    return {**data.get("packages", {}), **data.get("packages.conda", {})}


def _snapshot(channel: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(channel)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted(channel.rglob("*"))
        if p.is_file() and p.name != conda_mod.LOCK_NAME
    }


def test_self_hosted_channel_publish_index_install(tmp_path: Path, packages: dict[str, Path]) -> None:
    channel = tmp_path / "channel"
    files = [packages["native"], packages["noarch"]]
    assert package_subdir(packages["native"]) == "linux-64"

    written = publish_to_channel(channel, files)
    assert sorted(written) == sorted([f"linux-64/{files[0].name}", f"noarch/{files[1].name}"])
    for f in files:
        dest = channel / channel_key(f)
        assert dest.read_bytes() == f.read_bytes()
        assert dest.stat().st_mode & 0o777 == 0o644
        entry = _repodata(channel, package_subdir(f))[f.name]
        assert entry["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()
    assert not list(channel.rglob("*.partial"))

    # Publishing again is a no-op: nothing written, no file touched, repodata unchanged.
    before = _snapshot(channel)
    assert publish_to_channel(channel, files) == []
    assert _snapshot(channel) == before

    # A real solve + install with py-rattler, into a fresh prefix.
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        spec, expected = NAME, [NAME]
    else:
        spec, expected = f"{NAME}-bin", sorted([NAME, f"{NAME}-bin"])
    prefix = tmp_path / "env"
    installed = install_from_channel(channel, spec, prefix)
    assert installed == expected
    assert (prefix / "share" / NAME / "hello.txt").read_text() == "hello noarch\n"
    if f"{NAME}-bin" in expected:
        assert (prefix / "share" / f"{NAME}-bin" / "hello.txt").read_text() == "hello linux-64\n"
    assert (prefix / "conda-meta").is_dir()

    with pytest.raises(PublishError, match="cannot install"):
        install_from_channel(channel, "no-such-package", tmp_path / "env2")


def test_self_hosted_channel_replaces_changed_file_and_repairs_repodata(
    tmp_path: Path, packages: dict[str, Path]
) -> None:
    channel = tmp_path / "channel"
    noarch = packages["noarch"]
    publish_to_channel(channel, [noarch])

    # Same file name, other content (a rebuild): replaced, and repodata follows.
    rebuilt_dir = tmp_path / "rebuilt"
    rebuilt_dir.mkdir()
    rebuilt = _assemble(
        rebuilt_dir, name=NAME, version=VERSION, platform="noarch", text="rebuilt\n", tar_bz2=True, depends=[]
    )
    assert rebuilt.name == noarch.name
    assert rebuilt.read_bytes() != noarch.read_bytes()
    assert publish_to_channel(channel, [rebuilt]) == [f"noarch/{noarch.name}"]
    entry = _repodata(channel, "noarch")[noarch.name]
    assert entry["sha256"] == hashlib.sha256(rebuilt.read_bytes()).hexdigest()
    assert entry["size"] == rebuilt.stat().st_size

    # An interrupted publish (file copied, index never written): the next call repairs it.
    (channel / "noarch" / "repodata.json").unlink()
    assert publish_to_channel(channel, [rebuilt]) == []
    assert noarch.name in _repodata(channel, "noarch")

    not_conda = tmp_path / "notes.txt"
    not_conda.write_text("x")
    with pytest.raises(PublishError, match="not a conda package"):
        publish_to_channel(channel, [not_conda])


def test_self_hosted_channel_concurrent_publishers(tmp_path: Path) -> None:
    """Several publishers at once (threads here; the fcntl lock works across processes too):
    every package ends up in repodata.json."""
    out = tmp_path / "built"
    out.mkdir()
    pkgs = [
        _assemble(
            out,
            name=f"{NAME}-{i}",
            version=VERSION,
            platform="noarch",
            text=f"{i}\n",
            tar_bz2=i % 2 == 0,
            depends=[],
        )
        for i in range(8)
    ]
    channel = tmp_path / "channel"
    errors: list[BaseException] = []

    def publish(p: Path) -> None:
        try:
            publish_to_channel(channel, [p])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=publish, args=(p,)) for p in pkgs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert set(_repodata(channel, "noarch")) == {p.name for p in pkgs}


# ----------------------------------------------------------------------------- channel in a Store


def test_store_channel_file_mirror_publish_and_install(tmp_path: Path, packages: dict[str, Path]) -> None:
    from nightly.stores import open_store

    root = tmp_path / "mirror"
    store = open_store(root.as_uri())
    files = [packages["native"], packages["noarch"]]
    written = publish_to_store_channel(store, "conda/nightly", files)
    assert sorted(written) == sorted(channel_key(f) for f in files)
    channel = root / "conda" / "nightly"
    for f in files:
        assert (channel / channel_key(f)).read_bytes() == f.read_bytes()
        assert (
            _repodata(channel, package_subdir(f))[f.name]["sha256"]
            == hashlib.sha256(f.read_bytes()).hexdigest()
        )

    # Again: nothing uploaded, repodata.json not rewritten.
    etag = store.get_bytes("conda/nightly/noarch/repodata.json")
    assert publish_to_store_channel(store, "conda/nightly", files) == []
    assert store.get_bytes("conda/nightly/noarch/repodata.json") == etag

    if sys.platform == "linux" and os.uname().machine == "x86_64":
        installed = install_from_channel(channel, f"{NAME}-bin", tmp_path / "env")
        assert installed == sorted([NAME, f"{NAME}-bin"])
        assert (tmp_path / "env" / "share" / f"{NAME}-bin" / "hello.txt").read_text() == "hello linux-64\n"


@pytest.fixture
def moto_bucket() -> Iterator[tuple[str, str]]:
    with moto_server("AKIANIGHTLYCONDATEST", "nightly-conda-test-secret") as m:
        yield m.endpoint, m.new_bucket()


def test_store_channel_s3_concurrent_publishers(moto_bucket: tuple[str, str], tmp_path: Path) -> None:
    """Publishers racing on one repodata.json in S3 (moto): conditional writes keep every entry."""
    from nightly.stores import open_store

    endpoint, bucket = moto_bucket
    out = tmp_path / "built"
    out.mkdir()
    pkgs = [
        _assemble(
            out,
            name=f"{NAME}-{i}",
            version=VERSION,
            platform="noarch",
            text=f"{i}\n",
            tar_bz2=False,
            depends=[],
        )
        for i in range(6)
    ]
    errors: list[BaseException] = []

    def publish(p: Path) -> None:
        try:  # one Store per publisher, as separate machines would have
            publish_to_store_channel(open_store(f"s3://{bucket}/pub", endpoint_url=endpoint), "conda", [p])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=publish, args=(p,)) for p in pkgs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    store = open_store(f"s3://{bucket}/pub", endpoint_url=endpoint)
    got = store.get_bytes("conda/noarch/repodata.json")
    assert got is not None
    listed = json.loads(got[0])["packages.conda"]
    assert set(listed) == {p.name for p in pkgs}
    for p in pkgs:
        assert listed[p.name]["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()
        info = store.head(f"conda/noarch/{p.name}")
        assert info is not None
        assert info.sha256 == listed[p.name]["sha256"]

    # Mirror the S3 channel into a folder; py-rattler installs from it.
    mirror = tmp_path / "from-s3"
    for obj in store.list("conda/"):
        store.get(obj.key, mirror / obj.key.removeprefix("conda/"))
    assert install_from_channel(mirror, f"{NAME}-3", tmp_path / "env") == [f"{NAME}-3"]
    assert (tmp_path / "env" / "share" / f"{NAME}-3" / "hello.txt").read_text() == "3\n"
