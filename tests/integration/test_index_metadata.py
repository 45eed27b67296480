"""PEP 658/714 core metadata and PyTorch's layout, with pip and uv as the clients.

A torch-like wheel is published by `publish_day` (which stores `<wheel>.metadata` beside it)
into `whl/nightly/cpu/`; its dependency `pytorch-triton` sits in the channel root
`whl/nightly/`, configured as a shared folder. The mirror is served by a local HTTP server
that counts GETs: pip and uv must each fetch the metadata file once and the wheel once (no
second download of the wheel to read its metadata), and find pytorch-triton through the
cpu folder's own index.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import http.server
import shutil
import subprocess
import sys
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from nightly.config import Config, load
from nightly.index import IndexOptions, regenerate
from nightly.index.manifest import FileRecord, read_manifest
from nightly.index.metadata import from_wheel
from nightly.index.rebuild import rebuild_all
from nightly.publish.upload import publish_day
from nightly.stores import FileStore, S3Store, file_sha256, open_store
from nightly.workspace import SUCCEEDED, Day, State
from tests.support.wheels import make_wheel

if TYPE_CHECKING:
    from mypy_boto3_s3.type_defs import CompletedMultipartUploadTypeDef

VENV_BIN = Path(sys.executable).parent
TORCH = "torchlike-2.6.0.dev20261121+cpu-py3-none-any.whl"
TRITON = "pytorch_triton-3.2.0+git1234-py3-none-any.whl"


def serve_counting(root: Path) -> tuple[http.server.ThreadingHTTPServer, Counter[str]]:
    """Serve a folder over HTTP on 127.0.0.1, counting GETs per path."""
    gets: Counter[str] = Counter()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self) -> None:
            gets[self.path.split("?")[0]] += 1
            super().do_GET()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, gets


def big_wheel(out: Path, dist: str, version: str, filename: str, requires: list[str]) -> Path:
    """A valid wheel carrying 3 MB of incompressible payload and real dependency metadata."""
    path = make_wheel(out, dist, version, filename=filename)
    import zipfile

    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    meta = next(n for n in members if n.endswith("METADATA"))
    extra = "Requires-Python: >=3.9,<4\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    members[meta] += extra.encode()
    members[f"{dist}_payload.bin"] = bytes(range(256)) * (3 * 4096)
    # RECORD is not checked against the payload by pip for a --target install of this kind,
    # but keep it honest: drop RECORD's hashes rather than lie.
    record = next(n for n in members if n.endswith("RECORD"))
    members[record] = "".join(f"{n},,\n" for n in members).encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def write_config(tmp_path: Path, mirror: Path, extra: str = "") -> Config:
    text = f"""\
[project]
name = "torchlike"
source = "."
base_version = "2.6.0"

[matrix.linux.manywheel]
pythons = ["3.11"]
cudas = ["cpu"]

[[machines]]
name = "a"
platform = "linux"
queues = 1

[publish]
url = "{mirror.as_uri()}"
index_shared = ["whl/nightly"]
{extra}
"""
    path = tmp_path / "nightly.toml"
    path.write_text(text)
    return load(path)


def day_with(tmp_path: Path, wheels: dict[str, Path]) -> tuple[Day, State]:
    """A day whose builds (build id -> wheel) succeeded, the wheels in its package folder."""
    day = Day(tmp_path / "root", dt.date(2026, 11, 21))
    day.create()
    state = State(day.state_path)
    for bid, wheel in wheels.items():
        rel = Path("packages") / "manywheel" / "cpu" / wheel.name
        (day.path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(wheel, day.path / rel)
        pkg = {"name": wheel.name, "path": rel.as_posix(), "sha256": file_sha256(wheel)}
        state.update(bid, status=SUCCEEDED, package="manywheel", cuda="cpu", packages=[pkg])
    return day, state


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    """whl/nightly/cpu/ holds torchlike (published by publish_day), whl/nightly/ triton."""
    out = tmp_path / "wheels"
    out.mkdir()
    torch = big_wheel(out, "torchlike", "2.6.0.dev20261121+cpu", TORCH, ["pytorch-triton==3.2.0+git1234"])
    triton = big_wheel(out, "pytorch_triton", "3.2.0+git1234", TRITON, [])
    root = tmp_path / "mirror"
    store = FileStore(root)
    # The dependency goes to the channel root by other means (as PyTorch's own jobs do it).
    md = from_wheel(triton)
    store.put(f"whl/nightly/{TRITON}", triton, file_sha256(triton))
    store.put_bytes(f"whl/nightly/{TRITON}.metadata", md.data, "application/octet-stream")
    record = FileRecord(file_sha256(triton), md.sha256, md.requires_python)
    regenerate(store, ["whl/nightly"], full=False, known={"whl/nightly": {TRITON: record}},
               options=IndexOptions(shared=("whl/nightly",)))
    config = write_config(tmp_path, root)
    day, state = day_with(tmp_path, {"manywheel_3.11_cpu": torch})
    report = publish_day(config, day, state, channel="nightly", log=lambda _: None)
    assert report.ok, report
    return root


def test_upload_stores_core_metadata_and_pages_offer_it(mirror: Path) -> None:
    folder = mirror / "whl/nightly/cpu"
    metadata = (folder / f"{TORCH}.metadata").read_bytes()
    assert b"Requires-Dist: pytorch-triton==3.2.0+git1234" in metadata
    page = (folder / "torchlike/index.html").read_text()
    digest = hashlib.sha256(metadata).hexdigest()
    assert f'data-core-metadata="sha256={digest}"' in page
    assert f'data-dist-info-metadata="sha256={digest}"' in page
    assert 'data-requires-python="&gt;=3.9,&lt;4"' in page
    assert "data-upload-time=" in page
    # The shared root's dependency is listed by the accelerator folder, relatively.
    triton_page = (folder / "pytorch-triton/index.html").read_text()
    assert 'href="../../pytorch_triton-3.2.0%2Bgit1234-py3-none-any.whl#sha256=' in triton_page
    assert "pytorch-triton/" in (folder / "index.html").read_text()
    manifest = read_manifest(FileStore(mirror), "whl/nightly")
    assert manifest.folders == ("cpu",)


def _install(tool: str, index: str, target: Path) -> None:
    if tool == "pip":
        cmd = [sys.executable, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
               "--index-url", index, "--target", str(target), "torchlike"]
    else:
        cmd = [str(VENV_BIN / "uv"), "pip", "install", "--no-cache", "--python", sys.executable,
               "--index-url", index, "--target", str(target), "torchlike"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("tool", ["pip", "uv"])
def test_clients_resolve_from_metadata_and_download_each_wheel_once(
    tool: str, mirror: Path, tmp_path: Path
) -> None:
    server, gets = serve_counting(mirror)
    target = tmp_path / f"target-{tool}"
    try:
        _install(tool, f"http://127.0.0.1:{server.server_address[1]}/whl/nightly/cpu/", target)
    finally:
        server.shutdown()
    assert (target / "torchlike" / "__init__.py").is_file()
    assert (target / "pytorch_triton" / "__init__.py").is_file()  # through cpu/'s own index
    torch_url = "/whl/nightly/cpu/torchlike-2.6.0.dev20261121%2Bcpu-py3-none-any.whl"
    triton_url = "/whl/nightly/pytorch_triton-3.2.0%2Bgit1234-py3-none-any.whl"
    for url in (torch_url, triton_url):
        assert gets[url + ".metadata"] == 1, dict(gets)
        assert gets[url] == 1, dict(gets)  # one download to install, none to read metadata
    assert gets["/whl/nightly/cpu/pytorch-triton/"] == 1, dict(gets)


# --------------------------------------------------------------------------- existing buckets


def _links(page: str) -> list[str]:
    return [line for line in page.splitlines() if "<a href=" in line and ".whl" in line]


@pytest.fixture
def adopted(moto_endpoint: str, tmp_path: Path) -> tuple[Any, S3Store, dict[str, str]]:
    """A bucket written the way PyTorch's jobs write it: sha256 as x-amz-meta-checksum-sha256
    (or only S3's own checksum), `<wheel>.metadata` beside each wheel, no nightly manifest."""
    bucket = f"adopt-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=moto_endpoint)
    client.create_bucket(Bucket=bucket)
    out = tmp_path / "wheels"
    out.mkdir()
    sums: dict[str, str] = {}
    for n, folder in enumerate(["whl/nightly/cpu", "whl/nightly/cpu", "whl/nightly/cu126", "whl/nightly"]):
        name = f"torchlike-2.6.0.dev2026112{n}+x-py3-none-any.whl" if n < 3 else TRITON
        dist = "torchlike" if n < 3 else "pytorch_triton"
        version = f"2.6.0.dev2026112{n}+x" if n < 3 else "3.2.0+git1234"
        path = make_wheel(out, dist, version, filename=name)
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        sums[f"{folder}/{name}"] = digest
        if n == 1:  # only S3's own checksum, as `aws s3 cp --checksum-algorithm SHA256` leaves it
            client.put_object(Bucket=bucket, Key=f"{folder}/{name}", Body=data, ChecksumAlgorithm="SHA256",
                              ChecksumSHA256=base64.b64encode(bytes.fromhex(digest)).decode())
        else:
            client.put_object(Bucket=bucket, Key=f"{folder}/{name}", Body=data,
                              Metadata={"checksum-sha256": digest})
        md = from_wheel(path)
        client.put_object(Bucket=bucket, Key=f"{folder}/{name}.metadata", Body=md.data)
    store = open_store(f"s3://{bucket}", endpoint_url=moto_endpoint)
    assert isinstance(store, S3Store)
    return client, store, sums


def test_adopting_a_bucket_records_checksums_once(adopted: tuple[Any, S3Store, dict[str, str]]) -> None:
    _, store, sums = adopted
    options = IndexOptions(shared=("whl/nightly",))
    reports = rebuild_all(store, options, backfill=False, log=lambda _: None)
    assert sum(r.heads for r in reports) == len(sums)  # each wheel asked for once
    assert sum(r.metadata_reads for r in reports) == len(sums)
    for key, digest in sums.items():
        folder, _, name = key.rpartition("/")
        got = store.get_bytes(f"{folder}/torch_nightly.html")
        assert got is not None
        links = [line for line in _links(got[0].decode()) if name.replace("+", "%2B") in line]
        assert len(links) == 1, (key, links)
        assert f"#sha256={digest}" in links[0]
        assert 'data-core-metadata="sha256=' in links[0]
    for acc in ("cpu", "cu126"):
        got = store.get_bytes(f"whl/nightly/{acc}/pytorch-triton/index.html")
        assert got is not None
        assert f"#sha256={sums['whl/nightly/' + TRITON]}" in got[0].decode()
    # Later runs are incremental: nothing per object, whatever the folder count.
    store.requests_by_op.clear()
    reports = rebuild_all(store, options, backfill=False, log=lambda _: None)
    assert sum(r.heads + r.metadata_reads for r in reports) == 0
    ops = dict(store.requests_by_op)
    # One manifest check per folder, and the shared root's checked by both accelerator folders.
    assert ops["HeadObject"] == len(reports) + 2
    # One listing page per folder of the layout, whatever the object count: whl/, libtorch/
    # and whl/nightly/ a level at a time, then cpu/, cu126/ and pytorch-triton/ (its page).
    assert ops["ListObjectsV2"] == 6


def test_adopting_reads_metadata_with_the_same_bytes_once_on_s3(moto_endpoint: str) -> None:
    """Four Pythons of one version share their METADATA: one GET of a single-part upload (its
    ETag is the MD5 of the bytes) serves the four; a multipart one is read on its own."""
    bucket = f"same-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=moto_endpoint)
    client.create_bucket(Bucket=bucket)
    body = b"Metadata-Version: 2.1\nName: torchlike\nVersion: 2.6.0\nRequires-Python: >=3.10\n\n"
    names = [f"torchlike-2.6.0-{py}-{py}-linux_x86_64.whl" for py in ("cp310", "cp311", "cp312", "cp313")]
    for name in names:
        key = f"whl/cpu/{name}"
        client.put_object(Bucket=bucket, Key=key, Body=key.encode(),
                          Metadata={"checksum-sha256": hashlib.sha256(key.encode()).hexdigest()})
        if name != names[-1]:
            client.put_object(Bucket=bucket, Key=f"{key}.metadata", Body=body)
        else:  # the same bytes, uploaded in (one) part: an ETag ending in -1
            upload = client.create_multipart_upload(Bucket=bucket, Key=f"{key}.metadata")["UploadId"]
            part = client.upload_part(Bucket=bucket, Key=f"{key}.metadata", UploadId=upload, PartNumber=1,
                                      Body=body)
            parts: CompletedMultipartUploadTypeDef = {"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]}
            client.complete_multipart_upload(Bucket=bucket, Key=f"{key}.metadata", UploadId=upload,
                                             MultipartUpload=parts)
    assert client.head_object(Bucket=bucket, Key=f"whl/cpu/{names[-1]}.metadata")["ETag"].endswith('-1"')
    store = open_store(f"s3://{bucket}", endpoint_url=moto_endpoint)
    reports = rebuild_all(store, IndexOptions(), backfill=False, log=lambda _: None)
    assert sum(r.heads for r in reports) == 4
    assert sum(r.metadata_reads for r in reports) == 2  # one of the three, and the multipart one
    assert sum(r.metadata_shared for r in reports) == 2
    got = store.get_bytes("whl/cpu/torchlike/index.html")
    assert got is not None
    links = _links(got[0].decode())
    assert len(links) == 4
    digest = hashlib.sha256(body).hexdigest()
    assert all(f'data-core-metadata="sha256={digest}"' in link for link in links)
    assert all('data-requires-python="&gt;=3.10"' in link for link in links)


def test_backfill_metadata_reads_ranges_and_resumes(moto_endpoint: str, tmp_path: Path) -> None:
    bucket = f"backfill-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    store = open_store(f"s3://{bucket}/pub", endpoint_url=moto_endpoint)
    assert isinstance(store, S3Store)
    out = tmp_path / "wheels"
    out.mkdir()
    names = []
    for day in (19, 20, 21):
        name = f"torchlike-2.6.0.dev202611{day}+cpu-py3-none-any.whl"
        path = big_wheel(out, "torchlike", f"2.6.0.dev202611{day}+cpu", name, ["numpy>=1.22"])
        store.put(f"whl/nightly/cpu/{name}", path, file_sha256(path))
        names.append((name, path))
    ranges: list[tuple[str, int, int]] = []
    read_range = store.read_range

    def counted(key: str, start: int, length: int) -> bytes:
        ranges.append((key, start, length))
        return read_range(key, start, length)

    store.read_range = counted  # type: ignore[method-assign]
    rebuild_all(store, IndexOptions(), backfill=True, log=lambda _: None)
    for name, path in names:
        got = store.get_bytes(f"whl/nightly/cpu/{name}.metadata")
        assert got is not None
        assert got[0] == from_wheel(path).data
    # Two ranged GETs each (the end of the zip, then METADATA): the 3 MB wheels were not
    # downloaded.
    assert len(ranges) == 3 * 2, ranges
    assert sum(length for _, _, length in ranges) < sum(p.stat().st_size for _, p in names) / 4
    page = store.get_bytes("whl/nightly/cpu/torchlike/index.html")
    assert page is not None
    assert page[0].decode().count("data-core-metadata=") == 3
    # Resumable: a run stopped before the last wheel is finished by the next, which writes
    # only what is missing.
    store.delete(f"whl/nightly/cpu/{names[0][0]}.metadata")
    messages: list[str] = []
    rebuild_all(store, IndexOptions(), backfill=True, log=messages.append)
    assert "core metadata: 1 written, 2 already there, 0 failed" in messages
    assert store.head(f"whl/nightly/cpu/{names[0][0]}.metadata") is not None


# --------------------------------------------------------------------------- rebuilds


def test_a_rebuild_with_another_platform_tag_replaces_the_first(tmp_path: Path) -> None:
    """Issue 14 item 6: the build published linux_x86_64, auditwheel then made it manylinux:
    the first wheel leaves the store and the pages, the second is the only one listed."""
    out = tmp_path / "wheels"
    out.mkdir()
    first = make_wheel(out, "torchlike", "2.6.0", filename="torchlike-2.6.0-cp311-cp311-linux_x86_64.whl")
    second = make_wheel(
        out, "torchlike", "2.6.0", filename="torchlike-2.6.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    )
    other = make_wheel(out, "torchlike", "2.6.0", filename="torchlike-2.6.0-cp310-cp310-linux_x86_64.whl")
    root = tmp_path / "mirror"
    config = write_config(tmp_path, root)
    day, state = day_with(tmp_path, {"manywheel_3.11_cpu": first, "manywheel_3.10_cpu": other})
    assert publish_day(config, day, state, channel="nightly", log=lambda _: None).ok
    folder = root / "whl/nightly/cpu"
    assert (folder / first.name).is_file()
    # The rebuild: the same build now produced the manylinux wheel.
    rel = Path("packages/manywheel/cpu") / second.name
    shutil.copyfile(second, day.path / rel)
    pkg = {"name": second.name, "path": rel.as_posix(), "sha256": file_sha256(second)}
    state.update("manywheel_3.11_cpu", status=SUCCEEDED, packages=[pkg])
    report = publish_day(config, day, state, channel="nightly", log=lambda _: None)
    assert report.ok
    assert report.removed == {"whl/nightly/cpu": [first.name]}
    assert not (folder / first.name).exists()
    assert not (folder / f"{first.name}.metadata").exists()
    assert (folder / second.name).is_file()
    assert (folder / other.name).is_file()  # another build's wheel stays
    page = (folder / "torchlike/index.html").read_text()
    assert first.name not in page
    assert second.name in page
    assert other.name in page
    published = set(state.get("manywheel_3.11_cpu").published)
    assert published == {f"{root.as_uri()}/whl/nightly/cpu/{second.name}"}
