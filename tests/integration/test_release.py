"""Release candidates and their promotion, against the real servers of the publishing tests.

The demo project (examples/demo, built by the real recipes/) is released as a candidate with
`nightly release`, published to the test channel on moto's S3 server (boto3 over HTTP), to
the test label of the stand-in anaconda.org API (tests/support/fake_anaconda.py, driven by the real
anaconda-client), and promoted with `nightly promote`: S3 server-side copies to the release
folders, the release index pages, a label copy on the anaconda server and a twine upload to
pypiserver. pip then installs the release from a plain HTTP mirror of the bucket and from
pypiserver into fresh virtual environments.

Every `nightly` runs as a subprocess; the servers run in (moto, the anaconda stand-in) or
beside (pypiserver, http.server) the test process. S3 writes are counted from moto's own
request log (werkzeug's), so "changes nothing" means no PUT, POST or DELETE reached S3.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import boto3
import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from nightly.stores import file_sha256, open_store
from tests.support.fake_anaconda import FakeAnaconda
from tests.support.s3 import Moto
from tests.support.servers import (
    PYPI_PASSWORD,
    PYPI_USER,
    PypiServer,
    download_tree,
    fresh_venv,
    pip_install,
)

REPO = Path(__file__).resolve().parents[2]
RunCli = Callable[..., tuple[int, str, str]]  # the run_cli fixture (tests/support/fixtures.py)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:.crypt. is deprecated:DeprecationWarning"),
]

# The demo is built for the Python running the tests, so that fresh venvs made from it can
# install the wheels (cpXY tags).
XY = f"{sys.version_info.major}.{sys.version_info.minor}"
NODOT = XY.replace(".", "")
WHEEL_ID = f"manywheel_{XY}_cpu"
CONDA_ID = f"conda_{XY}_cpu"
LIBTORCH_ID = "libtorch_shared-with-deps_cpu"
PREFIX = "dist"  # the key prefix of publish.url in the bucket
OWNER = "nightly-owner"
ANACONDA_TOKEN = "release-test-anaconda-token-5e2d-DO-NOT-LEAK"
TOKEN_ENV = "NIGHTLY_TEST_ANACONDA_TOKEN"
PYPI_PASSWORD_ENV = "NIGHTLY_TEST_PYPI_PASSWORD"
SECRETS = {TOKEN_ENV: ANACONDA_TOKEN, PYPI_PASSWORD_ENV: PYPI_PASSWORD}
WRITES = ("PUT", "POST", "DELETE")


# --------------------------------------------------------------------------- configuration


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string is a JSON string
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(v)


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _is_tables(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def toml_dumps(doc: dict[str, Any]) -> str:
    """Enough TOML for a nightly.toml: scalars and arrays inline, tables, arrays of tables."""
    out: list[str] = []

    def table(path: list[str], body: dict[str, Any], header: str = "[{}]") -> None:
        if path:
            out.append("\n" + header.format(".".join(_key(k) for k in path)))
        for k, v in body.items():
            if not isinstance(v, dict) and not _is_tables(v):
                out.append(f"{_key(k)} = {_toml_value(v)}")
        for k, v in body.items():
            if isinstance(v, dict):
                table([*path, k], v)
            elif _is_tables(v):
                for item in v:
                    table([*path, k], item, "[[{}]]")

    table([], doc)
    return "\n".join(out) + "\n"


def demo_config(
    tmp: Path,
    *,
    bucket: str,
    endpoint: str,
    matrix: dict[str, Any] | None = None,
    recipes: Path = REPO / "recipes",
    anaconda_site: str = "",
    pypi_url: str = "",
    name: str = "nightly.toml",
) -> Path:
    """The repository's demo configuration (nightly.toml) pointed at tmp and the servers."""
    doc = tomllib.loads((REPO / "nightly.toml").read_text())
    doc["root"] = str(tmp / "root")
    doc["recipes"] = str(recipes)
    doc["project"]["source"] = str(REPO / "examples" / "demo")
    doc["matrix"] = {"linux": matrix or {"manywheel": {"pythons": [XY], "cudas": ["cpu"]}}}
    # The interpreter this venv was made from: a plain Python of the version the tests run.
    python = getattr(sys, "_base_executable", sys.executable)
    # These recipes are the repository's own: as root they may run as root (nightly/hardening.py).
    doc.setdefault("executor", {})["local"] = {"pythons": {XY: python},
                                               "user": "root" if os.geteuid() == 0 else ""}
    publish: dict[str, Any] = {
        "url": f"s3://{bucket}/{PREFIX}",
        "endpoint_url": endpoint,
        "find_links": doc["publish"]["find_links"],
    }
    if anaconda_site:
        publish["conda"] = {
            "anaconda_user": OWNER,
            "anaconda_site": anaconda_site,
            "token_env": TOKEN_ENV,
        }
    if pypi_url:
        publish["pypi"] = {
            "repository_url": pypi_url,
            "username": PYPI_USER,
            "password_env": PYPI_PASSWORD_ENV,
        }
    doc["publish"] = publish
    config = tmp / name
    config.write_text(toml_dumps(doc))
    return config


# --------------------------------------------------------------------------- S3 helpers


@dataclass
class Bucket:
    name: str
    client: Any

    def keys(self, under: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.name, Prefix=f"{PREFIX}/{under}"
        )
        return sorted(o["Key"][len(PREFIX) + 1 :] for p in pages for o in p.get("Contents", []))

    def head(self, key: str) -> dict[str, Any]:
        return self.client.head_object(Bucket=self.name, Key=f"{PREFIX}/{key}")  # type: ignore[no-any-return]

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=f"{PREFIX}/{key}")["Body"].read()  # type: ignore[no-any-return]

    def text(self, key: str) -> str:
        return self.get(key).decode()

    def put(self, key: str, data: bytes, sha256: str) -> None:
        self.client.put_object(
            Bucket=self.name, Key=f"{PREFIX}/{key}", Body=data, Metadata={"sha256": sha256}
        )

    def snapshot(self) -> dict[str, tuple[str, Any, dict[str, str]]]:
        """key -> (ETag, LastModified, metadata) of every object."""
        out = {}
        for key in self.keys():
            h = self.head(key)
            out[key] = (h["ETag"], h["LastModified"], h.get("Metadata", {}))
        return out


@pytest.fixture
def s3(moto: Moto, bucket: str) -> Bucket:
    return Bucket(bucket, boto3.client("s3", endpoint_url=moto.endpoint))


class _RequestLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.requests: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        m = re.search(r'"([A-Z]+) (\S+) HTTP/', record.getMessage())
        if m:
            self.requests.append((m[1], m[2]))


@contextmanager
def s3_requests(bucket: str) -> Iterator[list[tuple[str, str]]]:
    """The (method, path) of every request moto answers for `bucket` meanwhile (werkzeug logs
    each request moto's server handles, in this process)."""
    logger = logging.getLogger("werkzeug")
    handler = _RequestLog()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # into our handler only, not onto the test's output
    seen: list[tuple[str, str]] = []
    try:
        yield seen
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
        seen.extend(r for r in handler.requests if re.match(rf"/{re.escape(bucket)}([/?]|$)", r[1]))


def writes(requests: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [r for r in requests if r[0] in WRITES]


# --------------------------------------------------------------------------- other helpers


def state(root: Path, candidate: str) -> dict[str, Any]:
    return json.loads((root / "release" / candidate / "state.json").read_text())  # type: ignore[no-any-return]


def only_package(st: dict[str, Any], build_id: str) -> dict[str, Any]:
    entry = st["builds"][build_id]
    assert entry["status"] == "succeeded", entry
    (pkg,) = entry["packages"]
    return pkg  # type: ignore[no-any-return]


def installed(python: Path, cwd: Path) -> tuple[str, str, str]:
    """(distribution version, module __version__, module file) of nightlydemo in `python`."""
    out = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, nightlydemo; "
         "print(m.version('nightlydemo'), nightlydemo.__version__, nightlydemo.__file__)"],
        capture_output=True, text=True, check=True, cwd=cwd,
    )  # fmt: skip
    dist, module, where = out.stdout.split()
    return dist, module, where


def fail_recipe(recipes: Path, package: str) -> None:
    r = recipes / package / "build.sh"
    r.parent.mkdir(parents=True)
    r.write_text('#!/usr/bin/env bash\necho "error: the compiler failed" >&2\nexit 3\n')
    r.chmod(0o755)


# --------------------------------------------------------------------------- tests


def test_release_dry_run_builds_nothing(
    tmp_path: Path,
    s3: Bucket,
    moto: Moto,
    run_cli: RunCli,
) -> None:
    config = demo_config(tmp_path, bucket=s3.name, endpoint=moto.endpoint)
    with s3_requests(s3.name) as requests:
        code, out, err = run_cli(["release", "1.2.0", "--rc", "2", "--dry-run", "--config", str(config)])
    assert code == 0, out + err
    decoder, jobs, pos = json.JSONDecoder(), [], 0
    while out[pos:].strip():
        pos += len(out[pos:]) - len(out[pos:].lstrip())
        job, pos = decoder.raw_decode(out, pos)
        jobs.append(job)
    assert [j["build"] for j in jobs] == [WHEEL_ID]
    env = jobs[0]["env"]
    assert (env["BUILD_VERSION"], env["CHANNEL"]) == ("1.2.0", "test")
    # Built where host builds run (the stable build folder), collected into the candidate's.
    assert env["OUTPUT_DIR"] == str(tmp_path / "root" / ".builds" / "work" / WHEEL_ID / "out")
    # Nothing built, nothing written: no candidate folder, no object, no S3 write.
    assert not (tmp_path / "root" / "release").exists()
    assert not (tmp_path / "root" / ".builds").exists()
    assert s3.keys() == []
    assert writes(requests) == []
    # A candidate that was never built cannot be promoted (or dry-run promoted).
    code, out, err = run_cli(["promote", "1.2.0", "--rc", "2", "--dry-run", "--config", str(config)])
    assert code == 2, out + err
    assert "nightly release 1.2.0 --rc 2" in err
    assert "Traceback" not in err


def test_release_candidate_promoted_and_installed(
    tmp_path: Path,
    s3: Bucket,
    moto: Moto,
    pypiserver: PypiServer,
    http_server: Any,
    run_cli: RunCli,
) -> None:
    with FakeAnaconda(token=ANACONDA_TOKEN, users=(OWNER,)) as anaconda:
        config = demo_config(
            tmp_path,
            bucket=s3.name,
            endpoint=moto.endpoint,
            matrix={
                "manywheel": {"pythons": [XY], "cudas": ["cpu"]},
                "conda": {"pythons": [XY], "cudas": ["cpu"]},
            },
            anaconda_site=anaconda.url,
            pypi_url=pypiserver.url,
        )
        root = tmp_path / "root"
        cfg = ["--config", str(config)]

        # -- the candidate: built as 1.2.0, published to the test channel
        code, out, err = run_cli(["release", "1.2.0", "--rc", "1", *cfg], env=SECRETS, timeout=600)
        assert code == 0, out + err
        st = state(root, "1.2.0-rc1")
        assert (st["meta"]["version"], st["meta"]["channel"]) == ("1.2.0", "test")
        wheel = only_package(st, WHEEL_ID)
        conda_pkg = only_package(st, CONDA_ID)
        assert wheel["name"].startswith(f"nightlydemo-1.2.0-cp{NODOT}-cp{NODOT}-"), wheel
        assert conda_pkg["name"] == f"nightlydemo-1.2.0-py{NODOT}_cpu_1.conda", conda_pkg
        wheel_file = root / "release" / "1.2.0-rc1" / wheel["path"]
        conda_file = root / "release" / "1.2.0-rc1" / conda_pkg["path"]
        sha = file_sha256(wheel_file)
        assert wheel["sha256"] == sha
        assert conda_pkg["sha256"] == file_sha256(conda_file)

        name = wheel["name"]
        test_key = f"whl/test/cpu/{name}"
        assert test_key in s3.keys("whl/test/cpu/")
        assert s3.head(test_key)["Metadata"] == {"sha256": sha}
        assert hashlib.sha256(s3.get(test_key)).hexdigest() == sha
        assert 'href="nightlydemo/"' in s3.text("whl/test/cpu/index.html")
        quoted = name.replace("+", "%2B")
        assert f'href="../{quoted}#sha256={sha}"' in s3.text("whl/test/cpu/nightlydemo/index.html")
        assert f"#sha256={sha}" in s3.text("whl/test/cpu/nightlydemo_test.html")
        assert s3.keys("whl/cpu/") == []  # nothing released yet
        (dist,) = anaconda.find(conda_pkg["name"])
        assert (dist.owner, dist.labels) == (OWNER, ["test"])
        assert dist.data == conda_file.read_bytes()

        # -- promote --dry-run: says what it would do, does nothing
        before = s3.snapshot()
        n_anaconda = len(anaconda.requests)
        with s3_requests(s3.name) as requests:
            code, out, err = run_cli(["promote", "1.2.0", "--rc", "1", "--dry-run", *cfg], env=SECRETS)
        assert code == 0, out + err
        url = f"s3://{s3.name}/{PREFIX}"
        assert f"would copy {url}/{test_key} -> {url}/whl/cpu/{name}" in out
        assert f"would regenerate the index pages of {url}/whl/cpu/" in out
        assert f"would copy nightlydemo 1.2.0 from label test to anaconda:{OWNER}/main/" in out
        assert f"would upload {name} to {pypiserver.url} with twine" in out
        assert writes(requests) == [], requests
        assert s3.snapshot() == before
        assert not any(r.path.startswith("/copy/") for r in anaconda.requests[n_anaconda:])
        assert list(pypiserver.packages.iterdir()) == []
        assert "promoted" not in state(root, "1.2.0-rc1")["meta"]

        # -- without the twine password: refused before anything is copied anywhere
        with s3_requests(s3.name) as requests:
            code, out, err = run_cli(["promote", "1.2.0", "--rc", "1", *cfg], env={TOKEN_ENV: ANACONDA_TOKEN})
        assert code == 2, out + err
        assert PYPI_PASSWORD_ENV in err
        assert writes(requests) == [], requests
        assert not any(r.path.startswith("/copy/") for r in anaconda.requests[n_anaconda:])

        # -- promote: copied server-side, verified, indexed; conda label; twine
        with s3_requests(s3.name) as requests:
            code, out, err = run_cli(["promote", "1.2.0", "--rc", "1", *cfg], env=SECRETS)
        assert code == 0, out + err
        assert f"promoted: whl/cpu/{name} (sha256 verified)" in out
        release_key = f"whl/cpu/{name}"
        assert s3.head(release_key)["Metadata"] == {"sha256": sha}
        assert hashlib.sha256(s3.get(release_key)).hexdigest() == sha
        assert s3.head(release_key)["ETag"] == s3.head(test_key)["ETag"]
        # The wheel went from bucket to bucket (a copy), never up from this machine again.
        uploads = [p for _, p in writes(requests) if p.endswith(f"/whl/cpu/{name}")]
        assert len(uploads) == 1, requests
        assert 'href="nightlydemo/"' in s3.text("whl/cpu/index.html")
        assert f'href="../{quoted}#sha256={sha}"' in s3.text("whl/cpu/nightlydemo/index.html")
        assert f"#sha256={sha}" in s3.text("whl/cpu/nightlydemo_release.html")
        manifest = json.loads(s3.text("whl/cpu/.index.json"))
        assert {n: r["sha256"] for n, r in manifest["files"].items()} == {name: sha}
        labels = anaconda.labels_of(OWNER, "nightlydemo", "1.2.0", f"linux-64/{conda_pkg['name']}")
        assert labels == ["test", "main"]
        assert [d.data for d in anaconda.find(conda_pkg["name"])] == [conda_file.read_bytes()]
        assert (pypiserver.packages / name).read_bytes() == wheel_file.read_bytes()
        for r in anaconda.requests:
            assert ANACONDA_TOKEN not in r.path
        assert ANACONDA_TOKEN not in out + err
        assert PYPI_PASSWORD not in out + err

        # -- pip installs the release from the bucket's release index and from pypiserver
        mirror = tmp_path / "mirror"
        download_tree(open_store(url, endpoint_url=moto.endpoint), mirror)
        base = http_server(mirror)
        for n, index in enumerate([urljoin(base, "whl/cpu/"), pypiserver.simple]):
            venv = tmp_path / f"venv{n}"
            python = fresh_venv(venv)
            proc = pip_install(python, index, "nightlydemo==1.2.0", tmp_path)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            dist_version, module_version, where = installed(python, tmp_path)
            assert (dist_version, module_version) == ("1.2.0", "1.2.0"), index
            assert where.startswith(str(venv)), where

        # -- promote again: nothing changes anywhere
        before = s3.snapshot()
        pypi_before = {p.name: p.stat().st_mtime_ns for p in pypiserver.packages.iterdir()}
        n_anaconda = len(anaconda.requests)
        with s3_requests(s3.name) as requests:
            code, out, err = run_cli(["promote", "1.2.0", "--rc", "1", *cfg], env=SECRETS)
        assert code == 0, out + err
        assert requests, "moto's request log saw nothing: the count below would prove nothing"
        assert writes(requests) == [], requests
        assert s3.snapshot() == before
        assert f"already promoted: {url}/whl/cpu/{name}" in out
        assert f"index pages current: {url}/whl/cpu/" in out
        assert {p.name: p.stat().st_mtime_ns for p in pypiserver.packages.iterdir()} == pypi_before
        assert not any(r.path.startswith("/copy/") for r in anaconda.requests[n_anaconda:])
        assert anaconda.labels_of(OWNER, "nightlydemo", "1.2.0", f"linux-64/{conda_pkg['name']}") == labels
        assert "0 file(s) copied, 1 already promoted" in out
        assert f"already uploaded to {pypiserver.url}: 1 wheel(s)" in out


def test_incomplete_candidate_refused_unless_allowed(
    tmp_path: Path,
    s3: Bucket,
    moto: Moto,
    run_cli: RunCli,
) -> None:
    # The real manywheel recipe, and a libtorch recipe that fails.
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    for package in ("common", "manywheel"):
        (recipes / package).symlink_to(REPO / "recipes" / package)
    fail_recipe(recipes, "libtorch")
    matrix: dict[str, dict[str, Any]] = {
        "manywheel": {"pythons": [XY], "cudas": ["cpu"]},
        "libtorch": {"variants": ["shared-with-deps"], "python": XY, "cudas": ["cpu"]},
    }
    config = demo_config(tmp_path, bucket=s3.name, endpoint=moto.endpoint, matrix=matrix, recipes=recipes)
    cfg = ["--config", str(config)]
    code, out, err = run_cli(["release", "1.3.0", "--rc", "1", *cfg], timeout=600)
    assert code == 1, out + err  # one build failed
    st = state(tmp_path / "root", "1.3.0-rc1")
    assert st["builds"][LIBTORCH_ID]["status"] == "failed"
    name = only_package(st, WHEEL_ID)["name"]
    assert f"whl/test/cpu/{name}" in s3.keys("whl/test/")

    # Refused, naming the failed build; a glob that does not cover it changes nothing.
    for extra in ([], ["--allow-partial", "manywheel_*"], ["--dry-run"]):
        with s3_requests(s3.name) as requests:
            code, out, err = run_cli(["promote", "1.3.0", "--rc", "1", *extra, *cfg])
        assert code == 2, out + err
        assert LIBTORCH_ID in err, err
        assert "incomplete" in err
        assert WHEEL_ID not in err
        assert "--allow-partial" in err
        assert "Traceback" not in err
        assert writes(requests) == []
    # A build of the matrix that was never built at all is missing too.
    matrix["manywheel"]["pythons"] = [XY, "3.99"]
    wider = demo_config(
        tmp_path, bucket=s3.name, endpoint=moto.endpoint, matrix=matrix, recipes=recipes, name="wider.toml"
    )
    code, out, err = run_cli(["promote", "1.3.0", "--rc", "1", "--allow-partial", "libtorch_*",
                              "--config", str(wider)])  # fmt: skip
    assert code == 2, out + err
    assert "manywheel_3.99_cpu" in err, err
    assert LIBTORCH_ID not in err
    assert s3.keys("whl/cpu/") == []

    # Named as left out, it goes through with what there is.
    code, out, err = run_cli(["promote", "1.3.0", "--rc", "1", "--allow-partial", "libtorch_*", *cfg])
    assert code == 0, out + err
    assert f"promoting without (--allow-partial): {LIBTORCH_ID}" in out
    assert s3.keys("whl/cpu/") == sorted(
        [f"whl/cpu/{name}", f"whl/cpu/{name}.metadata", "whl/cpu/.index.json", "whl/cpu/index.html",
         "whl/cpu/nightlydemo/index.html", "whl/cpu/nightlydemo_release.html"]
    )  # fmt: skip
    assert s3.keys("libtorch/") == []


def test_tampered_test_object_is_not_promoted(
    tmp_path: Path,
    s3: Bucket,
    moto: Moto,
    run_cli: RunCli,
) -> None:
    config = demo_config(tmp_path, bucket=s3.name, endpoint=moto.endpoint)
    cfg = ["--config", str(config)]
    code, out, err = run_cli(["release", "1.4.0", *cfg], timeout=600)  # no --rc: release/1.4.0/
    assert code == 0, out + err
    pkg = only_package(state(tmp_path / "root", "1.4.0"), WHEEL_ID)
    built = (tmp_path / "root" / "release" / "1.4.0" / pkg["path"]).read_bytes()
    sha = pkg["sha256"]
    test_key = f"whl/test/cpu/{pkg['name']}"
    assert s3.head(test_key)["Metadata"] == {"sha256": sha}

    # 1. Other bytes, with their own sha256 in the metadata: the sha256 differs.
    evil = built[:-100] + b"\0" * 100
    evil_sha = hashlib.sha256(evil).hexdigest()
    s3.put(test_key, evil, evil_sha)
    code, out, err = run_cli(["promote", "1.4.0", *cfg])
    assert code == 1, out + err
    assert evil_sha in err, err
    assert f"sha256 {sha}" in err
    assert "not the one built" in err
    assert "Traceback" not in err
    assert s3.keys("whl/cpu/") == []

    # 2. Other bytes whose metadata still claims the build's sha256: the size gives it away.
    s3.put(test_key, evil + b"more", sha)
    code, out, err = run_cli(["promote", "1.4.0", *cfg])
    assert code == 1, out + err
    assert "not the one built" in err, err
    assert s3.keys("whl/cpu/") == []

    # Rerunning the release uploads the built file again (its sha256 differs from the
    # object's), and then the promotion goes through with the bytes that were built.
    s3.put(test_key, evil, evil_sha)
    code, out, err = run_cli(["release", "1.4.0", *cfg], timeout=600)
    assert code == 0, out + err
    assert s3.get(test_key) == built
    code, out, err = run_cli(["promote", "1.4.0", *cfg])
    assert code == 0, out + err
    assert s3.get(f"whl/cpu/{pkg['name']}") == built
    assert s3.head(f"whl/cpu/{pkg['name']}")["Metadata"] == {"sha256": sha}

    # A release file is never replaced: a different file of the same name in the release
    # folder (another candidate of 1.4.0 promoted?) makes promote refuse, changing nothing.
    s3.put(f"whl/cpu/{pkg['name']}", evil, evil_sha)
    with s3_requests(s3.name) as requests:
        code, out, err = run_cli(["promote", "1.4.0", *cfg])
    assert code == 1, out + err
    assert "already exists and is not this candidate's file" in err, err
    assert writes(requests) == []
    assert s3.get(f"whl/cpu/{pkg['name']}") == evil


def test_moto_request_log_sees_writes(s3: Bucket, tmp_path: Path) -> None:
    """The S3 write counting the tests above rely on does see writes."""
    with s3_requests(s3.name) as requests:
        s3.put("whl/cpu/x.whl", b"x", hashlib.sha256(b"x").hexdigest())
        s3.keys()
    assert ("PUT", f"/{s3.name}/{PREFIX}/whl/cpu/x.whl") in writes(requests)
    assert any(m == "GET" for m, _ in requests)
