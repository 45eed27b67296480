"""Helpers of the fault-injection and security suite.

- `wheel_recipe`: the integration suite's configurable bash recipe, writing a wheel-named
  package (so the night publishes it) instead of a tarball, optionally padded to a size.
- `check_published`: a file:// store after a night: exactly the expected package objects,
  each whole (sha256 of the bytes, and of the store's metadata), the folder manifests, and
  the index pages parsed link by link against the objects.
- `Traced`: `nightly` under strace, to stop or kill it at an exact system call (a rename, an
  unlink, a flock) instead of hoping a poll lands in a window of microseconds.
- `StoppableS3`: moto's S3 server on loopback that can die in the middle of a night (after
  the N-th package upload: listening socket closed, open connections cut) and come back on
  the same port with the same data.
- `scan_for`: every file under a folder, searched for secret values.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from tests.integration.conftest import _nightly_cmd, child_env, recipe_text

DATE = "2024_05_01"
VERSION = "1.0.0.dev20240501"
# The flat page of every folder these nights publish: `{project}_{channel}.html` (the default)
# for the project "demo" of tests/integration/conftest.py's configuration.
FIND_LINKS = "demo_nightly.html"
STRACE = shutil.which("strace")

# ---------------------------------------------------------------------------- recipes

_TARBALL = 'f="$OUTPUT_DIR/${ID}-${BUILD_VERSION}.tar.gz"'
_WHEEL = 'f="$OUTPUT_DIR/$(printf %s "$ID" | tr . _)-${BUILD_VERSION}+${DESIRED_CUDA}-py3-none-any.whl"'
_DONE = 'echo "done $ID"\n'
# `<signals>/<id>.big` holds a byte count: the package is padded with that much random data.
_PAD = 'if [ -e "$SIG/$ID.big" ]; then head -c "$(cat "$SIG/$ID.big")" /dev/urandom >> "$f"; fi\n'


def wheel_recipe(signals: Path, behaviours: Mapping[str, str] | None = None, default: str = "ok") -> str:
    """tests/integration/conftest.py's recipe, delivering `<id with _>-VERSION+CUDA-py3-none-any.whl`
    (not a real wheel: these nights run without smoke tests)."""
    text = recipe_text(signals, behaviours, default)
    assert _TARBALL in text, "the integration recipe changed"
    assert _DONE in text, "the integration recipe changed"
    return text.replace(_TARBALL, _WHEEL).replace(_DONE, _PAD + _DONE)


def wheel_name(build_id: str, cuda: str) -> str:
    return f"{build_id.replace('.', '_')}-{VERSION}+{cuda}-py3-none-any.whl"


def publish_toml(store: Path, *, smoke: bool = False) -> str:
    return f'[publish]\nurl = "{store.as_uri()}"\n\n[smoke]\nenabled = {str(smoke).lower()}\n'


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_args(config: Path, *extra: str, command: str = "run") -> list[str]:
    return [command, "--config", str(config), "--date", DATE, *extra]


# ---------------------------------------------------------------------------- pages


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text)))
            self._href = None


def page_links(data: bytes) -> list[tuple[str, str]]:
    """(href, text) of every <a> of a page, entities decoded."""
    p = _Links()
    p.feed(data.decode("utf-8"))
    p.close()
    return p.links


_TAG = re.compile(r'<(/?)([a-z][a-z0-9]*)((?:\s+[a-z:-]+="[^"<>]*")*)\s*(/?)>')
_ENTITY = re.compile(r"&(?:amp|lt|gt|quot|#x27|#39|#\d+|#x[0-9a-fA-F]+);")
_VOID = {"meta", "br", "link", "img", "hr", "input"}


def html_problems(data: bytes) -> list[str]:
    """Strict well-formedness of an index page: every tag matched, attributes double-quoted,
    no raw `<`, `>` or stray `&` in text or attribute values (only entities), UTF-8."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return [f"not UTF-8: {e}"]
    problems: list[str] = []
    if not text.startswith("<!DOCTYPE html>"):
        problems.append("no <!DOCTYPE html>")
    text = text.removeprefix("<!DOCTYPE html>")
    stack: list[str] = []
    pos = 0
    for m in _TAG.finditer(text):
        problems += _text_problems(text[pos : m.start()], where=f"text before offset {m.start()}")
        closing, name, attrs, _ = m.groups()
        for value in re.findall(r'="([^"]*)"', attrs):
            problems += _text_problems(value, where=f"attribute of <{name}>")
        if closing:
            if not stack or stack[-1] != name:
                problems.append(f"</{name}> closes {stack[-1] if stack else 'nothing'}")
            else:
                stack.pop()
        elif name not in _VOID:
            stack.append(name)
        pos = m.end()
    problems += _text_problems(text[pos:], where="trailing text")
    if stack:
        problems.append(f"unclosed tags: {stack}")
    return problems


def _text_problems(chunk: str, *, where: str) -> list[str]:
    out = []
    for ch in "<>\"":
        if ch in chunk and not (ch == '"' and where.startswith("text")):
            out.append(f"raw {ch!r} in {where}: {chunk[:80]!r}")
    if "&" in _ENTITY.sub("", chunk):
        out.append(f"stray '&' in {where}: {chunk[:80]!r}")
    return out


# ---------------------------------------------------------------------------- the store


def store_objects(root: Path) -> dict[str, Path]:
    """Every object of a file:// store (key -> file), its reserved folder left out."""
    out = {}
    for p in root.rglob("*"):
        rel = p.relative_to(root).as_posix()
        if rel.split("/", 1)[0] == ".nightly-store" or not p.is_file():
            continue
        out[rel] = p
    return out


def _is_package(name: str) -> bool:
    return name.endswith((".whl", ".zip", ".tar.gz", ".tar.bz2")) and not name.startswith(".")


def check_published(
    root: Path, expected: Mapping[str, str], *, find_links: str = FIND_LINKS
) -> None:
    """The file:// store at `root` holds exactly the package objects `expected` (key ->
    sha256), each whole (its bytes and the store's sha256 metadata), and every folder's
    manifest and pages agree with them."""
    from nightly.publish.stores import FileStore

    objects = store_objects(root)
    packages = {k: p for k, p in objects.items() if _is_package(k.rpartition("/")[2])}
    assert sorted(packages) == sorted(expected), "package objects differ from the builds' packages"
    store = FileStore(root)
    for key in packages:
        info = store.head(key)
        assert info is not None, key
        assert info.sha256 == expected[key], f"{key}: metadata {info}"
    check_tree(root, expected, find_links=find_links)


def check_tree(root: Path, expected: Mapping[str, str], *, find_links: str = FIND_LINKS) -> None:
    """A published tree on disk (a file:// store, or a download of a bucket): exactly the
    package objects `expected`, each whole, and per folder a manifest and pages that are
    the pages of exactly those files, parsed link by link."""
    from nightly.publish.index import project_of, render_folder
    from nightly.publish.manifest import decode_manifest

    objects = store_objects(root)
    packages = {k: p for k, p in objects.items() if _is_package(k.rpartition("/")[2])}
    assert sorted(packages) == sorted(expected), "package objects differ from the builds' packages"
    for key, path in packages.items():
        assert sha256_of(path) == expected[key], f"{key}: partial or foreign bytes"
    folders: dict[str, dict[str, str]] = {}
    for key, sha in expected.items():
        folder, _, name = key.rpartition("/")
        folders.setdefault(folder, {})[name] = sha
    for folder, files in folders.items():
        manifest = decode_manifest((root / folder / ".index.json").read_bytes())
        assert manifest is not None, f"{folder}/.index.json is unreadable"
        assert manifest.digests() == files, f"{folder}/.index.json does not list the objects"
        pages = render_folder(manifest.files or {}, find_links_name=find_links)
        for rel, content in pages.items():
            page = root / folder / rel
            assert page.read_bytes() == content, f"{folder}/{rel} is not the manifest's page"
            assert not html_problems(content), (rel, html_problems(content))
        # Parsed, link by link: every listed file exists with the listed sha256, every
        # package object is listed, on the flat page and on its project's page.
        flat = _listed(root / folder / find_links, root / folder)
        assert flat == files, f"{folder}/{find_links} lists {flat}"
        projects = {href for href, _ in page_links((root / folder / "index.html").read_bytes())}
        listed: dict[str, str] = {}
        for href in projects:
            assert href.endswith("/"), href
            page = root / folder / unquote(href) / "index.html"
            listed.update(_listed(page, page.parent))
        with_project = {n: s for n, s in files.items() if project_of(n) is not None}
        assert listed == with_project, f"{folder}: the project pages list {listed}"
        dirs = {p.name + "/" for p in (root / folder).iterdir() if p.is_dir()}
        assert dirs == {unquote(h) for h in projects}, f"{folder}: stale project pages {dirs}"


def _listed(page: Path, base: Path) -> dict[str, str]:
    """{file name: sha256} of a page's links, each checked against the file it points at."""
    out = {}
    for href, text in page_links(page.read_bytes()):
        path, _, fragment = href.partition("#")
        target = (base / unquote(path)).resolve()
        name = target.name
        assert text == name, (href, text)
        assert fragment.startswith("sha256="), href
        sha = fragment.removeprefix("sha256=")
        assert target.is_file(), f"{page} links to {target}, which does not exist"
        assert sha256_of(target) == sha, f"{page}: {name} is listed with sha256 {sha}"
        out[name] = sha
    return out


def expected_objects(state: Mapping[str, Any], channel: str = "nightly") -> dict[str, str]:
    """key -> sha256 of every package of the succeeded builds of a state.json."""
    out = {}
    for entry in state["builds"].values():
        if entry.get("status") != "succeeded":
            continue
        for pkg in entry.get("packages", []):
            out[f"whl/{channel}/{entry['cuda']}/{pkg['name']}"] = pkg["sha256"]
    return out


# ---------------------------------------------------------------------------- strace


@dataclass
class Traced:
    """`nightly ARGS` under `strace -f`, with system-call tampering (`inject=`)."""

    proc: subprocess.Popen[bytes]
    out_path: Path
    err_path: Path
    _files: list[Any] = field(default_factory=list)

    _pid: int = 0

    @property
    def nightly_pid(self) -> int:
        """The traced `nightly` process: strace's child, once it runs `nightly`."""
        if self._pid:
            return self._pid
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for task in Path(f"/proc/{self.proc.pid}/task").glob("*"):
                try:
                    children = (task / "children").read_text().split()
                except OSError:
                    continue
                for child in children:
                    try:
                        cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                    except OSError:
                        continue
                    # strace's own forks (probes, the child before it execs) carry strace's
                    # command line, which names nightly too.
                    if b"nightly" in cmdline and not cmdline.split(b"\0")[0].endswith(b"strace"):
                        self._pid = int(child)
                        return self._pid
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        raise AssertionError("strace started no nightly process")

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL to nightly itself (what the OOM killer or `kill -9` does), then to strace,
        which would otherwise sit out the delay it injected before letting the corpse go."""
        os.kill(self.nightly_pid, signal.SIGKILL)
        self.proc.kill()

    def wait(self, timeout: float = 60) -> tuple[str, str]:
        self.proc.wait(timeout=timeout)
        for f in self._files:
            f.close()
        return self.out_path.read_text(), self.err_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in self._files:
            f.close()


def start_traced(
    args: Sequence[str],
    strace_args: Sequence[str],
    tmp: Path,
    *,
    env: Mapping[str, str] | None = None,
    seccomp: bool = True,
) -> Traced:
    """`seccomp`: stop only at the traced calls (much faster). strace 6.1 then ignores a
    `signal=` injection filtered by -P, so a kernel kill needs seccomp=False."""
    assert STRACE, "strace is needed for the exact kill points (apt-get install strace)"
    n = len(list(tmp.glob("traced-*.out")))
    out_path, err_path = tmp / f"traced-{n}.out", tmp / f"traced-{n}.err"
    out, err = out_path.open("w"), err_path.open("w")
    cmd = [STRACE, "-f", "-qq", *(["--seccomp-bpf"] if seccomp else []), "-o", "/dev/null", *strace_args,
           *_nightly_cmd(), *args]  # fmt: skip
    proc = subprocess.Popen(cmd, env=child_env(env), stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    return Traced(proc, out_path, err_path, [out, err])


# ---------------------------------------------------------------------------- S3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StoppableS3:
    """moto's S3 server (its in-process backend: data survives a restart) on a fixed port.

    `start(die_after=N)`: after the response to the N-th PUT of a package object has been
    sent, the server dies: the listening socket is closed (new connections are refused) and
    any request on a connection kept alive is cut. `stop()` does the same at once.
    """

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.dead = threading.Event()
        self.puts: list[str] = []
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, die_after: int | None = None) -> StoppableS3:
        import logging

        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
        self.dead.clear()
        moto_app = DomainDispatcherApplication(create_backend_app)
        this = self

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if this.dead.is_set():
                _cut(environ)
                return []
            path = environ.get("PATH_INFO", "")
            is_upload = environ["REQUEST_METHOD"] == "PUT" and _is_package(path.rpartition("/")[2])
            body = moto_app(environ, start_response)
            if not is_upload:
                return body
            with this._lock:
                this.puts.append(path)
                last = die_after is not None and len(this.puts) >= die_after
            return _Closing(body, this._die if last else None)

        self._server = make_server("127.0.0.1", self.port, app, threaded=True,
                                   request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def _die(self) -> None:
        self.dead.set()
        threading.Thread(target=self._close, daemon=True).start()

    def _close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def stop(self) -> None:
        self.dead.set()
        self._close()
        if self._thread is not None:
            self._thread.join(10)

    def wait_dead(self, timeout: float = 30) -> None:
        assert self.dead.wait(timeout), "the S3 server never reached its kill point"
        if self._thread is not None:
            self._thread.join(timeout)

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")


def _cut(environ: Mapping[str, Any]) -> None:
    sock = environ.get("werkzeug.socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class _Closing:
    """A WSGI body whose close() (called once the response was sent) runs a hook."""

    def __init__(self, body: Iterable[bytes], hook: Callable[[], None] | None) -> None:
        self.body, self.hook = body, hook

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        close = getattr(self.body, "close", None)
        if close is not None:
            close()
        if self.hook is not None:
            self.hook()


def s3_env(access_key: str, secret_key: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def s3_objects(client: Any, bucket: str, prefix: str = "") -> dict[str, Any]:
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = obj
    return out


# ---------------------------------------------------------------------------- secrets


def scan_for(root: Path, needles: Mapping[str, str]) -> list[str]:
    """'path: name' for every file under `root` holding one of the secret values (or a
    16-character piece of one: a truncated secret is still a leak)."""
    pieces = {name: [value, _piece(value)] for name, value in needles.items()}
    hits = []
    for p in sorted(root.rglob("*")):
        if p.is_symlink() or not p.is_file():
            continue
        data = p.read_bytes()
        for name, values in pieces.items():
            if any(v.encode() in data for v in values):
                hits.append(f"{p}: {name}")
    return hits


def leaks_in_text(text: str, needles: Mapping[str, str]) -> list[str]:
    return [name for name, value in needles.items() if value in text or _piece(value) in text]


def _piece(value: str) -> str:
    """16 characters from the middle of a secret."""
    return value[len(value) // 2 - 8 : len(value) // 2 + 8]
