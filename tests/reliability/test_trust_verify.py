"""`nightly provenance keygen` and `nightly verify` against hostile input (issue 39): keygen
never writes through a link or over a file and makes its folder 0700; verify reads a URL with
a query, bounds what it downloads in size and in total time (a server that sends a byte every
few seconds is cut at the deadline), and refuses an empty --source-commit. All through the
command line, against real HTTP servers on loopback.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

NAME = "demo-1.0-py3-none-any.whl"


def signed_package(folder: Path, size: int = 1000) -> tuple[Path, Path]:
    """A package with nightly's provenance beside it; (package, public key)."""
    from nightly import provenance

    key, pub = provenance.keygen(folder / "keys")
    pkg = folder / "www" / NAME
    pkg.parent.mkdir(parents=True)
    pkg.write_bytes(os.urandom(size))
    facts = provenance.BuildFacts(
        name=NAME, sha256=hashlib.sha256(pkg.read_bytes()).hexdigest(), source_url="src",
        commit="3f2a9c1", branch="main", build_id="manywheel_3.11_cpu", package="manywheel",
        python="3.11", cuda="cpu")
    provenance.write(pkg, facts, provenance.load_signer(key))
    return pkg, pub


class _Trickle(http.server.BaseHTTPRequestHandler):
    """Answers 200 with a large body, sent one byte every `pause` seconds."""

    pause = 1.0

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        try:
            for _ in range(1000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(self.pause)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def serve_dir() -> Iterator[Any]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def serve(directory: Path | None, handler: Any = None) -> str:
        if handler is None:
            class Handler(http.server.SimpleHTTPRequestHandler):
                def __init__(self, *a: Any, **k: Any) -> None:
                    super().__init__(*a, directory=str(directory), **k)

                def log_message(self, *args: object) -> None:
                    pass
            handler = Handler
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield serve
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_verify_reads_a_url_with_a_query(tmp_path: Path, run_cli: Any, serve_dir: Any) -> None:
    pkg, pub = signed_package(tmp_path)
    base = serve_dir(pkg.parent)
    code, out, err = run_cli(["verify", "--key", str(pub), f"{base}/{NAME}?versionId=7#frag"])
    assert code == 0, (out, err)
    assert out.startswith("OK")
    assert "source:  src 3f2a9c1 (main)" in out


def test_verify_bounds_the_size_it_downloads(tmp_path: Path, run_cli: Any, serve_dir: Any) -> None:
    pkg, pub = signed_package(tmp_path, size=3 << 20)
    base = serve_dir(pkg.parent)
    code, out, err = run_cli(["verify", "--key", str(pub), "--max-size", "1", f"{base}/{NAME}"])
    assert code == 2, (out, err)
    assert "larger than 1048576 bytes" in one_line(err)
    code, out, err = run_cli(["verify", "--key", str(pub), "--max-size", "4", f"{base}/{NAME}"])
    assert code == 0, (out, err)


def test_verify_stops_a_trickling_server_at_the_deadline(
    tmp_path: Path, run_cli: Any, serve_dir: Any
) -> None:
    _, pub = signed_package(tmp_path)
    base = serve_dir(None, _Trickle)
    started = time.monotonic()
    code, out, err = run_cli(["verify", "--key", str(pub), "--timeout", "4", f"{base}/{NAME}"],
                             timeout=60)
    took = time.monotonic() - started
    assert code == 2, (out, err)
    line = one_line(err)
    assert "not done within the time allowed" in line or "timed out" in line, line
    # A byte a second keeps every read alive: only the overall deadline ends it (the
    # server would take 1000 s).
    assert took < 30, took


def test_verify_refuses_an_empty_source_commit(tmp_path: Path, run_cli: Any) -> None:
    pkg, pub = signed_package(tmp_path)
    code, out, err = run_cli(["verify", "--key", str(pub), "--source-commit", "", str(pkg)])
    assert code == 2, (out, err)
    assert "--source-commit is empty" in one_line(err)
    code, out, err = run_cli(["verify", "--key", str(pub), "--source-commit", "3f2a", str(pkg)])
    assert code == 0, (out, err)
    code, out, err = run_cli(["verify", "--key", str(pub), "--source-commit", "beef", str(pkg)])
    assert code == 1, (out, err)


def test_keygen_makes_its_folder_0700_and_never_writes_through_a_link(
    tmp_path: Path, run_cli: Any
) -> None:
    folder = tmp_path / "new" / "keys"
    code, out, err = run_cli(["provenance", "keygen", str(folder)])
    assert code == 0, (out, err)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "provenance.key").stat().st_mode) == 0o600
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    # Existing keys: refused, nothing changed.
    code, out, err = run_cli(["provenance", "keygen", str(folder)])
    assert code == 2, (out, err)
    assert "already there" in one_line(err)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before

    # A public key path that is there (a file of someone else's): not overwritten.
    other = tmp_path / "other"
    other.mkdir()
    (other / "provenance.pub").write_text("someone's file\n")
    code, out, err = run_cli(["provenance", "keygen", str(other)])
    assert code == 2, (out, err)
    assert "provenance.pub is already there" in one_line(err)
    assert (other / "provenance.pub").read_text() == "someone's file\n"
    assert not (other / "provenance.key").exists()

    # Links at the key paths, dangling or not: never followed.
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    for name, target in (("provenance.key", tmp_path / "nowhere" / "planted.key"),
                         ("provenance.pub", victim)):
        linked = tmp_path / f"linked-{name}"
        linked.mkdir()
        (linked / name).symlink_to(target)
        code, out, err = run_cli(["provenance", "keygen", str(linked)])
        assert code == 2, (out, err)
        assert "is a symbolic link" in one_line(err)
    assert victim.read_text() == "keep me\n"
    assert not (tmp_path / "nowhere").exists()

    # DIR that is a file: one line, exit 2.
    afile = tmp_path / "afile"
    afile.write_text("x")
    code, out, err = run_cli(["provenance", "keygen", str(afile)])
    assert code == 2, (out, err)
    assert "is not a folder" in one_line(err)
