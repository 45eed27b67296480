"""Package file names that need escaping, through the index code (`nightly index --full` on a
file:// mirror): the pages stay valid HTML (parsed strictly), every link leads to its file
with its sha256, and pip still installs from the same folder (real wheels with `+` local
versions and a dotted project name; a wheel cannot have `<` in its name, so pip is pointed
at the valid ones while the odd ones share their folder and pages).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nightly.index import project_of
from nightly.stores import FileStore
from tests.support.published import check_tree, html_problems, page_links, sha256_of
from tests.support.wheels import make_wheel

FOLDER = "whl/nightly/cpu"
ODD = [
    'demo_pkg-0.0.1 <b>"&" x.whl',
    "demo_pkg-0.0.2 &amp; &lt;already-escaped&gt;.whl",
    "a&b-1.0-py3-none-any.whl",
    "sp ace-1.0-py3-none-any.whl",
    'q"uote-1.0-py3-none-any.whl',
    "lt<gt>-1.0-py3-none-any.whl",
    "apos'trophe-1.0-py3-none-any.whl",
    "hash#frag-1.0-py3-none-any.whl",
    "query?x=1-1.0-py3-none-any.whl",
    "pct%2B-1.0-py3-none-any.whl",
    "plus+plus-1.0+cpu-py3-none-any.whl",
    "ünïcödé-1.0-py3-none-any.whl",
    "demo_pkg-0.0.3 <script>alert(1)<!--x-->.zip",
    "tab-less=equals;semi,comma-1.0.tar.gz",
]
# Real wheels pip must find: `+` local versions (written %2B in links) and a project name
# that PEP 503 normalises (Other.Project -> other-project).
REAL = [("demo_pkg", "1.0.0.dev20240430+cpu"), ("demo_pkg", "1.0.0.dev20240501+cpu"),
        ("Other.Project", "0.1+cpu")]  # fmt: skip


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(directory: Path) -> str:
        handler = partial(_Quiet, directory=str(directory))
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def pip(*args: str, target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--isolated", "--disable-pip-version-check",
         "--no-cache-dir", "--no-deps", "--quiet", "--target", str(target), *args],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip


def test_odd_names_keep_pages_valid_and_pip_installs(tmp_path: Path, run_cli: Any, serve: Any) -> None:
    mirror = tmp_path / "mirror"
    store = FileStore(mirror)
    built = tmp_path / "built"
    built.mkdir()
    expected: dict[str, str] = {}
    for dist, version in REAL:
        wheel = make_wheel(built, dist, version)
        expected[f"{FOLDER}/{wheel.name}"] = sha256_of(wheel)
        store.put(f"{FOLDER}/{wheel.name}", wheel, expected[f"{FOLDER}/{wheel.name}"])
    for i, name in enumerate(ODD):
        f = built / f"odd-{i}"
        f.write_bytes(f"not a real package: {name}\n".encode())
        expected[f"{FOLDER}/{name}"] = sha256_of(f)
        store.put(f"{FOLDER}/{name}", f, expected[f"{FOLDER}/{name}"])

    config = tmp_path / "nightly.toml"
    config.write_text(f"""\
[project]
name = "demo"
source = "src"
base_version = "1.0.0"
[matrix.linux.manywheel]
pythons = ["3.8"]
cudas = ["cpu"]
[[machines]]
name = "m"
platform = "linux"
queues = 1
[publish]
url = "{mirror.as_uri()}"
find_links = "torch_{{channel}}.html"
""")
    code, out, err = run_cli(["index", "--full", "--config", str(config)])
    assert code == 0, (out, err)

    # Valid HTML, every page; links and texts decode to the exact names.
    pages = sorted((mirror / FOLDER).rglob("*.html"))
    assert pages
    for page in pages:
        data = page.read_bytes()
        assert not html_problems(data), (page, html_problems(data))
        for bad in ("<b>", "<script>", '"&"', "&a", " & "):
            assert bad not in data.decode().replace("&amp;", "").replace("&lt;", "").replace(
                "&gt;", ""), (page, bad)
    flat = page_links((mirror / FOLDER / "torch_nightly.html").read_bytes())
    assert sorted(text for _, text in flat) == sorted(n.rpartition("/")[2] for n in expected)
    for href, _ in flat:
        path = href.partition("#")[0]
        assert all(c not in path for c in ' <>"&#?+\''), href  # all percent-encoded
    assert any("%2B" in href for href, _ in flat)
    check_tree(mirror, expected, find_links="torch_nightly.html")
    # An odd name whose project part is valid is on its project's page too.
    assert project_of(ODD[0]) == "demo-pkg"
    demo = {t for _, t in page_links((mirror / FOLDER / "demo-pkg/index.html").read_bytes())}
    assert ODD[0] in demo

    # pip, through a static web server over the mirror, both ways.
    base = serve(mirror) + FOLDER + "/"
    r = pip("--index-url", base, "demo_pkg==1.0.0.dev20240501+cpu", target=tmp_path / "t1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1.0.0.dev20240501+cpu" in (tmp_path / "t1/demo_pkg/__init__.py").read_text()
    r = pip("--no-index", "--find-links", base + "torch_nightly.html", "--pre", "demo_pkg",
            target=tmp_path / "t2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1.0.0.dev20240501+cpu" in (tmp_path / "t2/demo_pkg/__init__.py").read_text()  # newest
    r = pip("--index-url", base, "other.project", target=tmp_path / "t3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "t3/other_project/__init__.py").exists()
