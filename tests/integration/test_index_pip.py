"""pip as the client of the index pages.

Real (tiny) wheels are published to moto's S3 server and to a file:// mirror, the pages are
regenerated, the tree is copied into a folder and served by `python -m http.server`, and pip
installs from it into fresh virtual environments with `--index-url` and with `-f`.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urljoin

import boto3
import pytest

from nightly.index import read_manifest, regenerate, render_folder
from nightly.stores import FileStore, Store, file_sha256, open_store
from tests.support.servers import download_tree
from tests.support.wheels import make_wheel

FOLDER = "whl/nightly/cpu"
NEWEST = "1.0.0.dev20261121+cpu"
Serve = Callable[[Path], str]  # serve(directory) -> base URL
VERSIONS = ["0.9.0", "1.0.0.dev20261119+cpu", "1.0.0.dev20261120", NEWEST]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def s3_store(moto_endpoint: str) -> Store:
    bucket = f"pip-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    return open_store(f"s3://{bucket}/mirror", endpoint_url=moto_endpoint, acl="public-read")


NASTY = 'demo_pkg-0.0.1 <b>"&" x.whl'


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("wheels")
    built = [make_wheel(out, "demo_pkg", v) for v in VERSIONS]
    built.append(make_wheel(out, "Other.Project", "0.1"))
    built.append(make_wheel(out, "demo_pkg", "0.0.1", filename=NASTY))  # not installable
    return built


def publish(store: Store, wheels: list[Path]) -> dict[str, str]:
    """Upload like `nightly upload` does: objects first, then the index with their sha256."""
    known = {}
    for path in wheels:
        digest = file_sha256(path)
        store.put(f"{FOLDER}/{path.name}", path, digest)
        known[path.name] = digest
    regenerate(store, [FOLDER], full=False, known={FOLDER: known})
    return known


def pip_install(tmp_path: Path, *args: str) -> str:
    """Install into a fresh venv; return the installed demo_pkg version."""
    env_dir = tmp_path / f"venv-{uuid.uuid4().hex[:8]}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1"}
    env.pop("PIP_INDEX_URL", None)
    env.pop("PIP_EXTRA_INDEX_URL", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-cache-dir",
         "--disable-pip-version-check", "--pre", *args],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = subprocess.run(
        [str(python), "-c", "import demo_pkg, importlib.metadata as m; "
         "print(m.version('demo_pkg'), demo_pkg.VERSION)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    installed, module_version = out.stdout.split()
    assert installed == module_version
    return installed


# --------------------------------------------------------------------------- tests


def check_pages_follow_links(base: str, known: dict[str, str]) -> None:
    """Every link of every page resolves on the server to a file with the right sha256."""
    flat_url = urljoin(base, f"{FOLDER}/torch_nightly.html")
    flat = urllib.request.urlopen(flat_url).read().decode()
    hrefs = re.findall(r'href="([^"]+)"', flat)
    assert len(hrefs) == len(known)
    for href in hrefs:
        target, _, fragment = href.partition("#sha256=")
        name = unquote(target)
        assert known[name] == fragment
        body = urllib.request.urlopen(urljoin(flat_url, target)).read()
        assert hashlib.sha256(body).hexdigest() == fragment


def test_pip_installs_newest_nightly_from_s3_tree(
    s3_store: Store,
    wheels: list[Path],
    tmp_path: Path,
    http_server: Serve,
) -> None:
    known = publish(s3_store, wheels)
    mirror = tmp_path / "tree"
    download_tree(s3_store, mirror)
    base = http_server(mirror)
    check_pages_follow_links(base, known)
    index = urljoin(base, f"{FOLDER}/")
    assert pip_install(tmp_path, "--index-url", index, "demo_pkg") == NEWEST
    assert pip_install(tmp_path, "--index-url", index, "demo-pkg==1.0.0.dev20261120") == ("1.0.0.dev20261120")
    flat = urljoin(base, f"{FOLDER}/torch_nightly.html")
    assert pip_install(tmp_path, "--no-index", "-f", flat, "demo-pkg") == NEWEST
    # The other project is reachable under its normalised name.
    other = tmp_path / "other"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(other / "bin" / "python"), "install",
         "--no-cache-dir", "--disable-pip-version-check", "--index-url", index, "other-project"],
        check=True, capture_output=True,
    )  # fmt: skip


def test_pip_installs_from_file_mirror(
    wheels: list[Path],
    tmp_path: Path,
    http_server: Serve,
) -> None:
    root = tmp_path / "mirror"
    store = open_store(root.as_uri())
    known = publish(store, wheels[:2])  # first the two oldest, then the rest: incremental
    known |= publish(store, wheels[2:])
    assert read_manifest(store, FOLDER).digests() == known
    index = (root / FOLDER).as_uri() + "/"
    assert pip_install(tmp_path, "--index-url", index, "demo-pkg") == NEWEST
    flat = (root / FOLDER / "torch_nightly.html").as_uri()
    assert pip_install(tmp_path, "--no-index", "-f", flat, "demo-pkg") == NEWEST
    # The mirror folder itself, served as it is, works too.
    base = http_server(root)
    check_pages_follow_links(base, known)
    assert pip_install(tmp_path, "--index-url", urljoin(base, f"{FOLDER}/"), "demo-pkg") == NEWEST


def test_s3_and_file_trees_are_identical(s3_store: Store, wheels: list[Path], tmp_path: Path) -> None:
    publish(s3_store, wheels)
    s3_tree = tmp_path / "s3"
    download_tree(s3_store, s3_tree)
    file_store = FileStore(tmp_path / "file")
    publish(file_store, wheels)
    file_tree = tmp_path / "file-copy"
    download_tree(file_store, file_tree)

    # Upload times (PEP 700) are each store's own clock: everything else is the same.
    stamp = re.compile(rb'( data-upload-time="|"upload_time":")[^"]*"')

    def tree(root: Path) -> dict[str, bytes]:
        files = [p for p in root.rglob("*") if p.is_file()]
        return {str(p.relative_to(root)): stamp.sub(rb'\1"', p.read_bytes()) for p in files}

    assert tree(s3_tree) == tree(file_tree)


def test_concurrent_regeneration_on_s3(s3_store: Store, wheels: list[Path]) -> None:
    """Four "machines" upload and regenerate the same folder at once: nothing is lost."""
    errors: list[BaseException] = []
    known: dict[str, str] = {}

    def machine(n: int) -> None:
        try:
            mine = {}
            for path in wheels[n::4]:
                digest = file_sha256(path)
                s3_store.put(f"{FOLDER}/{path.name}", path, digest)
                mine[path.name] = digest
            known.update(mine)
            regenerate(s3_store, [FOLDER], full=n == 0, known={FOLDER: mine})
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=machine, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    manifest = read_manifest(s3_store, FOLDER)
    files = manifest.files
    assert files is not None
    assert manifest.digests() == known
    for rel, content in render_folder(files).items():
        got = s3_store.get_bytes(f"{FOLDER}/{rel}")
        assert got is not None
        assert got[0] == content, rel


def test_incremental_on_s3_makes_no_request_per_object(s3_store: Store, tmp_path: Path) -> None:
    for n in range(30):
        (tmp_path / f"w{n}").write_bytes(b"w%d" % n)
    first = {f"demo_pkg-1.0.{n}-py3-none-any.whl": tmp_path / f"w{n}" for n in range(30)}
    publish_known = {}
    for name, path in first.items():
        publish_known[name] = file_sha256(path)
        s3_store.put(f"{FOLDER}/{name}", path, publish_known[name])
    regenerate(s3_store, [FOLDER], full=False, known={FOLDER: publish_known})
    s3_store.requests_by_op.clear()
    path = tmp_path / "w0"
    s3_store.put(f"{FOLDER}/demo_pkg-2.0-py3-none-any.whl", path, file_sha256(path))
    regenerate(
        s3_store, [FOLDER], full=False,
        known={FOLDER: {"demo_pkg-2.0-py3-none-any.whl": file_sha256(path)}},
    )  # fmt: skip
    ops = dict(s3_store.requests_by_op)
    # upload 1 + manifest 1 + pages 3 = 5 PUTs, 1 GET of the manifest, 1 HEAD to check it,
    # and 1 GET of the new wheel's `.metadata` (it was given only a sha256; there is none).
    assert ops == {"PutObject": 5, "GetObject": 2, "HeadObject": 1}
